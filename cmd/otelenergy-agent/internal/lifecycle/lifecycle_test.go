package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestShutdownHungStop stops three services whose middle stop hangs until
// the test ends: Shutdown returns at ctx's deadline, reports the hung one
// by name, and still runs the stop below it.
func TestShutdownHungStop(t *testing.T) {
	var st lifecycle.Stack
	release := make(chan struct{})
	defer close(release)
	ran := make(chan string, 3)
	st.Push("first", func(ctx context.Context) error { ran <- "first"; return ctx.Err() })
	st.Push("hung", func(context.Context) error { <-release; return nil })
	st.Push("last", func(context.Context) error { ran <- "last"; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := st.Shutdown(ctx)
	if el := time.Since(began); el > 5*time.Second {
		t.Fatalf("Shutdown took %v past a 50 ms deadline", el)
	}
	if err == nil || !strings.Contains(err.Error(), "failed to shut down hung: context deadline exceeded") {
		t.Fatalf("err = %v", err)
	}
	if a, b := <-ran, <-ran; a != "last" || b != "first" {
		t.Fatalf("ran %s, %s", a, b)
	}
}

// TestShutdownAfter stops the services above one, then the rest, each
// under its own context.
func TestShutdownAfter(t *testing.T) {
	var st lifecycle.Stack
	var stopped []string
	for _, name := range []string{"telemetry", "source", "agent"} {
		st.Push(name, func(context.Context) error { stopped = append(stopped, name); return nil })
	}
	if err := st.ShutdownAfter(context.Background(), "nothing"); err != nil || len(stopped) != 0 {
		t.Fatalf("an unknown name stopped %q (%v)", stopped, err)
	}
	if err := st.ShutdownAfter(context.Background(), "telemetry"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stopped, []string{"agent", "source"}) || !slices.Equal(st.Names(), []string{"telemetry"}) {
		t.Fatalf("stopped %q, left %q", stopped, st.Names())
	}
	if err := st.Shutdown(context.Background()); err != nil || !slices.Equal(stopped, []string{"agent", "source", "telemetry"}) {
		t.Fatalf("stopped %q (%v)", stopped, err)
	}
}
