package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

type tableConfig struct {
	On   bool
	Name string
	Tags []string
}

var testTable = Table[tableConfig]{Program: "t", EnvPrefix: "T_", Flags: []Flag[tableConfig]{
	{Name: "on", Default: "false", Bool: true, Usage: "switch", Set: func(c *tableConfig, v string) error { return Bool(&c.On, v) }},
	{Name: "the-name", Default: "x", Usage: "a name", Set: func(c *tableConfig, v string) error {
		if v == "" {
			return errors.New("want a name")
		}
		c.Name = v
		return nil
	}},
	{Name: "tags", Usage: "tags", Set: func(c *tableConfig, v string) error { c.Tags = List(v); return nil }},
}}

func TestTableParse(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    tableConfig
		rest    int
		wantErr error
		errText string
	}{
		{name: "defaults", want: tableConfig{Name: "x"}},
		{name: "variable", env: map[string]string{"T_THE_NAME": "y", "T_TAGS": " a, ,b "}, want: tableConfig{Name: "y", Tags: []string{"a", "b"}}},
		{name: "flag wins over variable", args: []string{"-the-name", "z", "-on"}, env: map[string]string{"T_THE_NAME": "y"}, want: tableConfig{On: true, Name: "z"}},
		{name: "rest", args: []string{"-on", "--", "cmd", "arg"}, want: tableConfig{On: true, Name: "x"}, rest: 2},
		{name: "bad variable names it", env: map[string]string{"T_THE_NAME": ""}, wantErr: ErrInvalid, errText: "T_THE_NAME (-the-name)"},
		{name: "bad flag", args: []string{"-on=maybe"}, wantErr: ErrInvalid, errText: "-on"},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: ErrInvalid, errText: "nope"},
		{name: "help", args: []string{"-h"}, wantErr: flag.ErrHelp},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got tableConfig
			rest, err := testTable.Parse(&got, c.args, env(c.env))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("err %v, want %v naming %q", err, c.wantErr, c.errText)
				}
				return
			}
			if err != nil || len(rest) != c.rest || got.On != c.want.On || got.Name != c.want.Name || strings.Join(got.Tags, ",") != strings.Join(c.want.Tags, ",") {
				t.Fatalf("got %+v, rest %q, err %v; want %+v with %d left", got, rest, err, c.want, c.rest)
			}
		})
	}
}

func TestTableUsage(t *testing.T) {
	var b bytes.Buffer
	testTable.WriteFlags(&b)
	for _, want := range []string{"-on\n", "(default false; env T_ON)", "-the-name value", "(default x; env T_THE_NAME)", `(default ""; env T_TAGS)`} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("usage lacks %q:\n%s", want, b.String())
		}
	}
	if got := strings.Join(testTable.Names(), ","); got != "on,the-name,tags" {
		t.Fatalf("Names() = %s", got)
	}
}

// TestTableWrapsCheckError: a bad value's error, from a variable or from
// the command line, matches ErrInvalid and the sentinel its check wrapped,
// in one line naming the flag.
func TestTableWrapsCheckError(t *testing.T) {
	errOdd := errors.New("odd")
	tb := Table[tableConfig]{Program: "t", EnvPrefix: "T_", Flags: []Flag[tableConfig]{
		{Name: "even", Default: "0", Usage: "an even number", Set: func(c *tableConfig, v string) error {
			if len(v)%2 == 1 && v != "0" {
				return fmt.Errorf("%w: want an even length", errOdd)
			}
			return nil
		}},
		{Name: "on", Default: "false", Bool: true, Usage: "switch", Set: func(c *tableConfig, v string) error { return Bool(&c.On, v) }},
	}}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		odd  bool
	}{
		{name: "flag", args: []string{"-even", "abc"}, odd: true},
		{name: "variable", env: map[string]string{"T_EVEN": "abc"}, odd: true},
		{name: "other flag", args: []string{"-on=maybe"}},
		{name: "unknown flag", args: []string{"-nope"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got tableConfig
			_, err := tb.Parse(&got, c.args, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if !errors.Is(err, ErrInvalid) || errors.Is(err, errOdd) != c.odd || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v: want one line matching ErrInvalid, and errOdd %t", err, c.odd)
			}
		})
	}
}
