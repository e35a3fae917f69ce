package proxy

import (
	"context"
	"errors"
	"fmt"
)

// lifecycle is the list of the proxy's started services, shut down in
// the reverse order of their start, as the OpenTelemetry Collector's
// service and Kepler's internal/service do. Every start failure and every
// exit takes the same path: what started is stopped, nothing else.
//
// The order of start is what makes the reverse right: the admin server
// (readiness) first, then the backend, the energy source, the telemetry
// providers, the Monitor, the trace pipeline, and the API server last. So
// the API drains first, producers (the Monitor) stop before the
// consumers they feed (the exporters), and the admin server, which
// answers 503 throughout, stops last. Readiness itself flips before any of
// this (see proxy.shutdown).
//
// It is used by one goroutine.
type lifecycle struct {
	services []service
}

// service is one started part of the proxy and how to stop it.
type service struct {
	name string
	stop func(context.Context) error
}

// add records a started service; its stop runs at shutdown, after the
// stops of every service added later.
func (l *lifecycle) add(name string, stop func(context.Context) error) {
	l.services = append(l.services, service{name: name, stop: stop})
}

// shutdown stops every service in reverse order, each once, and returns
// their errors, each wrapped as "failed to shut down NAME: ERR".
func (l *lifecycle) shutdown(ctx context.Context) error {
	var errs []error
	for i := len(l.services) - 1; i >= 0; i-- {
		s := l.services[i]
		if err := s.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("failed to shut down %s: %w", s.name, err))
		}
	}
	l.services = nil
	return errors.Join(errs...)
}
