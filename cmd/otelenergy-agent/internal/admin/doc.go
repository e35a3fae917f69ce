// Package admin serves the agent's probes: /healthz answers 200 while the
// process runs; /readyz answers 200 once the agent is ready and until its
// shutdown starts, and 503 otherwise.
//
// # Readiness during shutdown
//
// [Server.Stopping] flips readiness to 503 before anything else stops, so
// that a load balancer or a Kubernetes endpoint stops counting the pod
// while it still answers; the listener closes later, at [Server.Shutdown].
package admin
