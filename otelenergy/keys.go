package otelenergy

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/otelenergy/otelenergy/runscope"
)

// EnergyMillijoulesKey is the span attribute that carries a request's
// energy in whole millijoules (int64). docs/metrics.md lists every
// attribute and instrument this package sets.
const EnergyMillijoulesKey = attribute.Key("energy.millijoules")

// co2eKey is the span attribute that carries a request's emissions in mg
// CO2e (float64), with [WithCarbon]. It is unexported so that the package
// grows no exported name; docs/metrics.md lists it.
const co2eKey = attribute.Key("energy.co2e.milligrams")

// Attribute keys this package sets besides EnergyMillijoulesKey. The hw.*
// keys come from the semconv package matching the SDK; the gen_ai.* keys
// are GenAI semantic convention keys that the Go semconv packages stopped
// carrying, so they are defined here; the otelenergy.* keys are this
// package's own.
const (
	approximateKey  = attribute.Key("otelenergy.energy.approximate")
	sharedKey       = attribute.Key("otelenergy.energy.shared")
	sourceKey       = attribute.Key("otelenergy.source")
	windowKey       = attribute.Key("otelenergy.window")
	outputTokensKey = attribute.Key("gen_ai.usage.output_tokens")
	inputTokensKey  = attribute.Key("gen_ai.usage.input_tokens")
	// cachedInputTokensKey is the GenAI registry's name (semconv v1.40.0
	// on, Go semconv/v1.40.0 and v1.41.0): a part of the input tokens.
	cachedInputTokensKey = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	tokenTypeKey         = attribute.Key("gen_ai.token.type")
	coefficientKey       = attribute.Key("otelenergy.ledger.coefficient")
	anomalyKey           = attribute.Key("otelenergy.anomaly")
	reasonKey            = attribute.Key("otelenergy.reason")
	carbonSourceKey      = attribute.Key("otelenergy.carbon.source")
	carbonKindKey        = attribute.Key("otelenergy.carbon.kind")
	runIDKey             = runscope.RunIDKey
)
