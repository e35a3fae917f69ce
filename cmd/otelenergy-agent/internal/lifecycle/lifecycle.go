package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Stack holds the services started so far. The zero value is an empty
// stack. A Stack is safe for concurrent use, though the agent starts and
// stops its services from one goroutine.
type Stack struct {
	// BeforeStart, when set, is called with each service's name before it
	// starts; an error it returns fails that start. It is a test seam that
	// injects a start failure at any stage.
	BeforeStart func(name string) error
	// AfterStop, when set, is called with each service's name after its
	// stop returns; a test seam that watches the order.
	AfterStop func(name string)

	mu    sync.Mutex
	names []string
	stops []func(context.Context) error
}

// Start runs start, and on success pushes the stop it returns (nil when
// the service needs no stop). A failure is returned as "failed to start
// name: %w"; nothing is pushed, and the services started before stay on
// the stack for [Stack.Shutdown].
func (s *Stack) Start(name string, start func() (stop func(context.Context) error, err error)) error {
	if s.BeforeStart != nil {
		if err := s.BeforeStart(name); err != nil {
			return fmt.Errorf("failed to start %s: %w", name, err)
		}
	}
	stop, err := start()
	if err != nil {
		return fmt.Errorf("failed to start %s: %w", name, err)
	}
	s.Push(name, stop)
	return nil
}

// Push adds a started service; stop may be nil.
func (s *Stack) Push(name string, stop func(context.Context) error) {
	if stop == nil {
		stop = func(context.Context) error { return nil }
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
	s.stops = append(s.stops, stop)
}

// Names returns the services on the stack, in the order they started.
func (s *Stack) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// Shutdown stops every service on the stack, the last started first, and
// empties it. Each stop gets ctx; a failed stop does not keep the others
// from running. It returns the stops' errors, each wrapped as "failed to
// shut down name: %w", joined.
//
// A stop that outlives ctx is left running and reported as "failed to shut
// down name: " and ctx's error; the next stops still run, with ctx done, so
// that Shutdown returns once ctx is done even when a stop hangs in a
// device call that no context reaches.
func (s *Stack) Shutdown(ctx context.Context) error {
	return s.shutdown(ctx, 0)
}

// ShutdownAfter stops, as [Stack.Shutdown] does, the services started
// after the service named name, and leaves that one and those before it on
// the stack; when no service is named name, it stops none.
func (s *Stack) ShutdownAfter(ctx context.Context, name string) error {
	s.mu.Lock()
	i := slices.Index(s.names, name)
	s.mu.Unlock()
	if i < 0 {
		return nil
	}
	return s.shutdown(ctx, i+1)
}

// shutdown stops the services from the keep-th on.
func (s *Stack) shutdown(ctx context.Context, keep int) error {
	s.mu.Lock()
	keep = min(keep, len(s.names))
	names, stops := s.names[keep:], s.stops[keep:]
	s.names, s.stops = slices.Clip(s.names[:keep]), slices.Clip(s.stops[:keep])
	s.mu.Unlock()
	var errs []error
	for i := len(stops) - 1; i >= 0; i-- {
		if err := within(ctx, stops[i]); err != nil {
			errs = append(errs, fmt.Errorf("failed to shut down %s: %w", names[i], err))
		}
		if s.AfterStop != nil {
			s.AfterStop(names[i])
		}
	}
	return errors.Join(errs...)
}

// within runs stop and returns its error, or ctx's once ctx is done first.
func within(ctx context.Context, stop func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- stop(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // a stop that finished as ctx ended
			return err
		default:
			return ctx.Err()
		}
	}
}
