package proxy

import (
	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// baggageOptions returns the Monitor options for -baggage-keys: those
// baggage members become attributes of the span and of
// otelenergy.request.energy, -baggage-values distinct values per key.
func baggageOptions(cfg flags.Config) []otelenergy.Option {
	if len(cfg.BaggageKeys) == 0 {
		return nil
	}
	return []otelenergy.Option{otelenergy.WithBaggageAttributes(cfg.BaggageValues, cfg.BaggageKeys...)}
}
