// Package reqcarbon tells an integration (otelenergy/openaiproxy) whether
// the Monitor behind a request converts its energy into emissions
// (otelenergy.WithCarbon), so that it can announce the
// Energy-Co2e-Milligrams trailer before the figure exists. It adds no
// exported name to package otelenergy: the Request's context answers
// [Key] with a bool.
package reqcarbon

import "context"

// Key is the context key under which an otelenergy Request answers
// whether its Monitor has carbon.
type Key struct{}

// On reports whether ctx belongs to an otelenergy Request whose Monitor
// converts energy into emissions.
func On(ctx context.Context) bool {
	on, _ := ctx.Value(Key{}).(bool)
	return on
}
