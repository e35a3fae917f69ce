package otelenergy

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/otelenergy/otelenergy/runscope"
)

// Attribute keys this package sets. The hw.* keys come from the semconv
// package matching the SDK; the gen_ai.* keys are GenAI semantic convention
// keys that the Go semconv packages stopped carrying, so they are defined
// here; the otelenergy.* keys are this package's own.
const (
	// EnergyMillijoulesKey is the span attribute carrying a request's energy
	// in whole millijoules (int64).
	EnergyMillijoulesKey = attribute.Key("energy.millijoules")
	// EnergySamplesKey counts the counter samples inside a request's window.
	EnergySamplesKey = attribute.Key("otelenergy.energy.samples")
	// EnergyApproximateKey is true when a request's window is shorter than
	// the counter's update period, or an edge of it was estimated.
	EnergyApproximateKey = attribute.Key("otelenergy.energy.approximate")
	// SourceKey names the energy source kind: nvml, simulated or custom.
	SourceKey = attribute.Key("otelenergy.source")
	// WindowKey tells the live J/token figure (live) from the run's (run).
	WindowKey = attribute.Key("otelenergy.window")
	// RunIDKey is the run's id, on spans, per-run points and run resources.
	RunIDKey = runscope.RunIDKey
	// ModelKey is gen_ai.request.model.
	ModelKey = runscope.ModelKey
	// OutputTokensKey is gen_ai.usage.output_tokens.
	OutputTokensKey = attribute.Key("gen_ai.usage.output_tokens")
	// InputTokensKey is gen_ai.usage.input_tokens.
	InputTokensKey = attribute.Key("gen_ai.usage.input_tokens")
	// TokenTypeKey is gen_ai.token.type: output or input.
	TokenTypeKey = attribute.Key("gen_ai.token.type")
)
