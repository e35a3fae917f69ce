package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Flag is one entry of a binary's flag table: a flag declared once, with
// its name, default, usage and the check that sets a value into the
// binary's configuration C. The environment variable is derived from the
// name (see [Table.Env]).
type Flag[C any] struct {
	Name, Default, Usage string
	// Bool marks a flag that takes no value on the command line (-simulate
	// means -simulate=true).
	Bool bool
	// Set checks v and sets it into c. Its error says what is wanted, in
	// a few words; the table names the flag.
	Set func(c *C, v string) error
}

// Table is a binary's flags, each with an environment variable: the one
// place where the binary, its tests and its deployment manifests learn a
// flag's name, default and variable. The zero value has no flags; a Table
// is read-only once built and safe for concurrent use.
type Table[C any] struct {
	// Program names the binary in parse errors.
	Program string
	// EnvPrefix begins every flag's variable: with "OTELENERGY_",
	// -admin-listen is OTELENERGY_ADMIN_LISTEN.
	EnvPrefix string
	Flags     []Flag[C]
}

// Env returns the environment variable of flag name.
func (t Table[C]) Env(name string) string {
	return t.EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Names returns every flag's name, in the table's order.
func (t Table[C]) Names() []string {
	out := make([]string, len(t.Flags))
	for i, f := range t.Flags {
		out[i] = f.Name
	}
	return out
}

// Parse sets every flag's default into c, then its variable where
// lookupEnv finds one, then the command line, and returns the arguments
// left after the flags. A variable that lookupEnv reports as set, even to
// "", is a value like any other; a binary that treats "" as unset says so
// in the lookupEnv it passes. It returns [flag.ErrHelp] for -h and -help,
// and an error matching [ErrInvalid], one line naming the flag or the
// variable, for a bad value; that error also wraps the error of the
// flag's Set, so that errors.Is finds a sentinel the check wrapped.
//
// A default that its own check refuses is a bug in the table, and Parse
// panics on it: every binary's tests parse an empty command line.
func (t Table[C]) Parse(c *C, args []string, lookupEnv func(string) (string, bool)) ([]string, error) {
	fs := flag.NewFlagSet(t.Program, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package formats a Set error with %v; setErr keeps the
	// last one, so that the returned error still wraps it (a carbon
	// flag's carbon.ErrInvalidConfig, say).
	var setErr error
	for i := range t.Flags {
		f := &t.Flags[i]
		v := &value[C]{f: f, c: c, err: &setErr}
		if err := v.Set(f.Default); err != nil && f.Default != "" {
			panic(fmt.Sprintf("cli: default of -%s: %v", f.Name, err))
		}
		if e, ok := lookupEnv(t.Env(f.Name)); ok {
			if err := v.Set(e); err != nil {
				return nil, invalidError{fmt.Sprintf("invalid value %q for %s (-%s): %v", e, t.Env(f.Name), f.Name, err), err}
			}
		}
		fs.Var(v, f.Name, f.Usage)
	}
	setErr = nil
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, flag.ErrHelp
		}
		return nil, invalidError{err.Error(), setErr}
	}
	return fs.Args(), nil
}

// WriteFlags writes every flag of the table for -h: its name, usage,
// default and variable.
func (t Table[C]) WriteFlags(w io.Writer) {
	for _, f := range t.Flags {
		arg := " value"
		if f.Bool {
			arg = ""
		}
		def := f.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s%s\n    \t%s\n    \t(default %s; env %s)\n", f.Name, arg, f.Usage, def, t.Env(f.Name))
	}
}

// value adapts a Flag to flag.Value.
type value[C any] struct {
	f   *Flag[C]
	c   *C
	cur string
	err *error // the table's last Set error
}

func (v *value[C]) String() string { return v.cur }
func (v *value[C]) Set(s string) error {
	if err := v.f.Set(v.c, s); err != nil {
		*v.err = err
		return err
	}
	v.cur = s
	return nil
}
func (v *value[C]) IsBoolFlag() bool { return v.f.Bool }

// Invalid returns a one-line error, msg, that matches [ErrInvalid].
func Invalid(msg string) error { return invalidError{msg: msg} }

// invalidError is a one-line error that matches [ErrInvalid] and wraps
// the check's own error, if any, so that errors.Is also finds the
// sentinel a check wrapped.
type invalidError struct {
	msg string
	err error
}

func (e invalidError) Error() string        { return e.msg }
func (e invalidError) Is(target error) bool { return target == ErrInvalid }
func (e invalidError) Unwrap() error        { return e.err }

// Bool parses v as a flag's boolean into b.
func Bool(b *bool, v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*b = x
	return nil
}

// List splits a comma-separated value, dropping empty entries and the
// spaces around each.
func List(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
