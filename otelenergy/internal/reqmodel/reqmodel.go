// Package reqmodel carries the model a request names from the reader
// that parses its body (otelenergy/openaiproxy) to the Monitor that
// records its energy, so that otelenergy.request.energy has the request's
// gen_ai.request.model, known only once the body is read, after the
// request has started. It adds no exported name to package otelenergy:
// the Request's context answers [Key] with its [Slot].
package reqmodel

import (
	"context"
	"sync/atomic"
)

// Key is the context key under which an otelenergy Request answers with
// its *Slot.
type Key struct{}

// Slot holds a request's model name. The zero value holds none. It is
// safe for concurrent use: the request's goroutine sets it, the sampler
// reads it when the request's figure is final.
type Slot struct{ model atomic.Pointer[string] }

// Set records model; an empty name is ignored.
func (s *Slot) Set(model string) {
	if s != nil && model != "" {
		s.model.Store(&model)
	}
}

// Get returns the model recorded, or "".
func (s *Slot) Get() string {
	if s == nil {
		return ""
	}
	if p := s.model.Load(); p != nil {
		return *p
	}
	return ""
}

// From returns the Slot of the request ctx belongs to, or nil outside an
// otelenergy request.
func From(ctx context.Context) *Slot {
	s, _ := ctx.Value(Key{}).(*Slot)
	return s
}
