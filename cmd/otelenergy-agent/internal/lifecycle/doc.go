// Package lifecycle is the agent's one way to start and stop its services:
// a [Stack] of the services started so far, shut down in reverse order, as
// the OpenTelemetry Collector's service and Kepler's internal/service do.
//
// # Order
//
// Services are pushed in the order they start, so that the reverse order
// stops what depends on another before what it depends on. The agent
// pushes its telemetry first (so it stops last), its producers after their
// consumers (so they stop first) and its readiness last (so it flips
// first).
//
// # Errors
//
// A start that fails is wrapped as "failed to start X: %w", a stop that
// fails as "failed to shut down X: %w". Shutdown stops every service even
// when some fail, and joins their errors. Each stop runs under the
// shutdown's context: one that outlives it is left running and reported
// with the context's error, so that a stop hung in a device call cannot
// hold the process past its shutdown timeout.
package lifecycle
