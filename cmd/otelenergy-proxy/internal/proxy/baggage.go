package proxy

import (
	"github.com/otelenergy/otelenergy/cmd/otelenergy-proxy/flags"
	"github.com/otelenergy/otelenergy/otelenergy"
)

// baggageOptions returns the Monitor options for -baggage-keys.
func baggageOptions(cfg flags.Config) []otelenergy.Option {
	return nil
}
