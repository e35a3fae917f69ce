package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

func TestLoggingFlags(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		wantErr bool
		json    bool
		debug   bool
	}{
		{name: "defaults"},
		{name: "json debug", args: []string{"-log-format", "json", "-log-level", "debug"}, json: true, debug: true},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: true},
		{name: "bad format", args: []string{"-log-format", "xml"}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var l Logging
			l.AddFlags(fs)
			err := fs.Parse(c.args)
			if c.wantErr {
				if err == nil || !errors.Is(err, ErrInvalid) && !strings.Contains(err.Error(), "want") {
					t.Fatalf("%v: want an error naming the accepted values", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			lg := l.NewLogger(&out)
			lg.Debug("d")
			lg.Info("i")
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if got := len(lines) == 2; got != c.debug {
				t.Fatalf("debug line logged %t, want %t: %q", got, c.debug, out.String())
			}
			var m map[string]any
			if isJSON := json.Unmarshal([]byte(lines[0]), &m) == nil; isJSON != c.json {
				t.Fatalf("JSON %t, want %t: %q", isJSON, c.json, lines[0])
			}
		})
	}
}

func TestCheckErrorsMatch(t *testing.T) {
	if err := CheckLevel("trace"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CheckLevel: %v", err)
	}
	if err := CheckFormat("logfmt"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CheckFormat: %v", err)
	}
}

func TestBuildFromInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Path: "example.com/cmd/x", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	b := buildOf(bi, true)
	want := "example.com/cmd/x v1.2.3 (revision 0123456789ab, modified, 2026-01-02T03:04:05Z) go1.26.8"
	if b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
	if u := buildOf(nil, false); u.Version != "unknown" || u.Revision != "unknown" {
		t.Fatalf("without build info: %+v", u)
	}
	// go run, or a build without VCS stamping: the line says how to get
	// the commit in, rather than "revision unknown".
	bi.Main.Version, bi.Settings = "(devel)", nil
	if got, want := buildOf(bi, true).String(), "example.com/cmd/x (devel) ("+NoRevision+") go1.26.8"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestVersionFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := AddVersionFlag(fs)
	if err := fs.Parse([]string{"-version"}); err != nil || !*v {
		t.Fatalf("-version: %v %v", *v, err)
	}
}
