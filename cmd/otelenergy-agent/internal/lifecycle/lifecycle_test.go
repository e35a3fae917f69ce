package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/lifecycle"
)

// TestStartFailureAtEveryStage starts four services and fails the start of
// each in turn: the services started before it stop in reverse order, the
// failed one and those after it never start, and the error names the
// stage.
func TestStartFailureAtEveryStage(t *testing.T) {
	stages := []string{"telemetry", "monitor", "agent", "admin"}
	for fail := range stages {
		t.Run(stages[fail], func(t *testing.T) {
			var started, stopped []string
			var st lifecycle.Stack
			boom := errors.New("boom")
			var err error
			for i, name := range stages {
				err = st.Start(name, func() (func(context.Context) error, error) {
					if i == fail {
						return nil, boom
					}
					started = append(started, name)
					return func(context.Context) error { stopped = append(stopped, name); return nil }, nil
				})
				if err != nil {
					break
				}
			}
			if !errors.Is(err, boom) || err.Error() != "failed to start "+stages[fail]+": boom" {
				t.Fatalf("err = %v", err)
			}
			if err := st.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(stages[:fail])
			slices.Reverse(want)
			if !slices.Equal(started, stages[:fail]) || !slices.Equal(stopped, want) {
				t.Fatalf("started %q, stopped %q; want %q, %q", started, stopped, stages[:fail], want)
			}
		})
	}
}

// TestShutdownErrorsNameTheirStage fails two stops: every service still
// stops, and each error names its service.
func TestShutdownErrorsNameTheirStage(t *testing.T) {
	var st lifecycle.Stack
	var stopped []string
	for _, name := range []string{"a", "b", "c"} {
		st.Push(name, func(context.Context) error {
			stopped = append(stopped, name)
			if name != "b" {
				return fmt.Errorf("%s broke", name)
			}
			return nil
		})
	}
	st.Push("nil stop", nil)
	err := st.Shutdown(context.Background())
	if !slices.Equal(stopped, []string{"c", "b", "a"}) {
		t.Fatalf("stopped %q", stopped)
	}
	for _, want := range []string{"failed to shut down c: c broke", "failed to shut down a: a broke"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to contain %q", err, want)
		}
	}
	if len(st.Names()) != 0 || st.Shutdown(context.Background()) != nil {
		t.Fatal("a second Shutdown stops again")
	}
}

// TestBeforeStart injects a failure through the hook: the service's own
// start never runs.
func TestBeforeStart(t *testing.T) {
	st := lifecycle.Stack{BeforeStart: func(name string) error {
		if name == "b" {
			return errors.New("injected")
		}
		return nil
	}}
	ran := false
	if err := st.Start("a", func() (func(context.Context) error, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	err := st.Start("b", func() (func(context.Context) error, error) { ran = true; return nil, nil })
	if ran || err == nil || err.Error() != "failed to start b: injected" {
		t.Fatalf("ran %v, err %v", ran, err)
	}
	if got := st.Names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("names %q", got)
	}
}
