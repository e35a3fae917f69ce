package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
)

// Flag names, defaults and usages shared by the binaries.
const (
	LevelFlag     = "log-level"
	DefaultLevel  = "info"
	LevelUsage    = "log level: debug, info, warn or error"
	FormatFlag    = "log-format"
	DefaultFormat = "text"
	FormatUsage   = "log format: text or json"
	VersionFlag   = "version"
	VersionUsage  = "print the version and build information and exit"
)

// ErrInvalid matches every error this package returns for a bad value.
var ErrInvalid = errors.New("invalid value")

// CheckLevel returns nil for an accepted -log-level value.
func CheckLevel(v string) error {
	switch v {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("%w %q: want debug, info, warn or error", ErrInvalid, v)
}

// CheckFormat returns nil for an accepted -log-format value.
func CheckFormat(v string) error {
	if v == "text" || v == "json" {
		return nil
	}
	return fmt.Errorf("%w %q: want text or json", ErrInvalid, v)
}

// Logging is the value of the logging flags. The zero value selects the
// defaults, info and text.
type Logging struct {
	Level  string // -log-level
	Format string // -log-format
}

// AddFlags adds -log-level and -log-format to fs, set into l and checked
// as they are parsed.
func (l *Logging) AddFlags(fs *flag.FlagSet) {
	l.Level, l.Format = DefaultLevel, DefaultFormat
	fs.Func(LevelFlag, LevelUsage+" (default "+DefaultLevel+")", func(v string) error {
		if err := CheckLevel(v); err != nil {
			return err
		}
		l.Level = v
		return nil
	})
	fs.Func(FormatFlag, FormatUsage+" (default "+DefaultFormat+")", func(v string) error {
		if err := CheckFormat(v); err != nil {
			return err
		}
		l.Format = v
		return nil
	})
}

// NewLogger returns the logger l selects, writing to w: slog's JSON
// handler for json, its text handler otherwise, at l's level (info when
// unset or not accepted).
func (l Logging) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	if CheckLevel(l.Level) == nil {
		level.UnmarshalText([]byte(l.Level))
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// AddVersionFlag adds -version to fs and returns its value.
func AddVersionFlag(fs *flag.FlagSet) *bool {
	return fs.Bool(VersionFlag, false, VersionUsage)
}

// Build is a binary's build information, from runtime/debug.ReadBuildInfo.
type Build struct {
	Path      string // the main package's import path
	Version   string // the main module's version: a tag, or (devel) from a checkout
	Revision  string // the VCS revision, or "unknown"
	Time      string // the VCS commit time, RFC 3339, or "unknown"
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string // the Go toolchain that built it
}

// ReadBuild returns this binary's build information; it never fails.
func ReadBuild() Build { return buildOf(debug.ReadBuildInfo()) }

func buildOf(bi *debug.BuildInfo, ok bool) Build {
	b := Build{Path: "unknown", Version: "unknown", Revision: "unknown", Time: "unknown", GoVersion: "unknown"}
	if !ok || bi == nil {
		return b
	}
	if bi.Path != "" {
		b.Path = bi.Path
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// NoRevision is what -version says of a build that recorded no commit:
// go run, a build with -buildvcs=false or outside a git checkout, or one
// that relied on the default -buildvcs=auto, which records none for this
// repository's binaries (modules of a workspace, below the repository's
// root), in the workspace or with GOWORK=off alike.
const NoRevision = "revision unknown: no commit recorded; build it from a git clone with go build -buildvcs=true"

// String is the one line -version prints, such as
// "github.com/otelenergy/otelenergy/cmd/otelenergy-proxy v0.3.0 (revision 1c5b8c0, 2026-12-01T11:18:29Z) go1.26.8",
// or, for a build that recorded no commit,
// "github.com/otelenergy/otelenergy/cmd/otelenergy-proxy (devel) (revision unknown: no commit recorded; ...) go1.26.8".
func (b Build) String() string {
	var sb strings.Builder
	if b.Revision == "unknown" {
		fmt.Fprintf(&sb, "%s %s (%s) %s", b.Path, b.Version, NoRevision, b.GoVersion)
		return sb.String()
	}
	fmt.Fprintf(&sb, "%s %s (revision %s", b.Path, b.Version, short(b.Revision))
	if b.Modified {
		sb.WriteString(", modified")
	}
	fmt.Fprintf(&sb, ", %s) %s", b.Time, b.GoVersion)
	return sb.String()
}

// LogValue logs the build as a group.
func (b Build) LogValue() slog.Value {
	return slog.GroupValue(slog.String("version", b.Version), slog.String("revision", b.Revision),
		slog.Bool("modified", b.Modified), slog.String("time", b.Time), slog.String("go", b.GoVersion))
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
