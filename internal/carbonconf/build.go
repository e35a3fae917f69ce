package carbonconf

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
)

// Carbon is what the carbon flags built: the model a binary hands to the
// library (otelenergy.WithCarbon) or converts with itself, and the
// poller behind it when a provider is named. A nil *Carbon is carbon off;
// its methods do nothing. Its methods are safe for concurrent use.
type Carbon struct {
	// Model converts energy into emissions.
	Model *carbon.Model
	// Poller polls the provider; nil for a static intensity.
	Poller *carbon.Poller
	cfg    Config
}

// Build returns the model that c describes, and its poller when c names a
// provider, or nil when carbon is off. It starts nothing (see
// [Carbon.Start]). It reads the provider's secret from the file
// -carbon-token-file names, else from the process's environment variable
// [TokenEnv]; a failure names the flag or the variable, never the
// secret, and wraps [carbon.ErrInvalidConfig]. opts configure the
// provider's HTTP client (tests point it at a fake server).
func Build(c Config, opts ...carbon.ClientOption) (*Carbon, error) {
	if !c.Enabled() {
		return nil, nil
	}
	mopts := []carbon.ModelOption{carbon.WithPUE(c.PUE), carbon.WithEmbodied(c.Embodied)}
	static := carbon.Intensity{MgPerKWh: c.Intensity, Kind: carbon.Average, Source: carbon.SourceStatic}
	if c.Provider == "" {
		m, err := carbon.NewModel(carbon.NewStatic(static), mopts...)
		if err != nil {
			return nil, err
		}
		return &Carbon{Model: m, cfg: c}, nil
	}
	prov, err := provider(c, opts)
	if err != nil {
		return nil, err
	}
	popts := []carbon.PollerOption{carbon.WithPollInterval(c.PollInterval), carbon.WithStaleAfter(c.StaleAfter)}
	if c.HasIntensity {
		popts = append(popts, carbon.WithFallback(static))
	}
	pl, err := carbon.NewPoller(prov, popts...)
	if err != nil {
		return nil, err
	}
	m, err := carbon.NewModel(pl, mopts...)
	if err != nil {
		return nil, err
	}
	return &Carbon{Model: m, Poller: pl, cfg: c}, nil
}

// provider builds c's provider, reading its secret.
func provider(c Config, opts []carbon.ClientOption) (carbon.Provider, error) {
	if c.Provider == ProviderUKGrid {
		p, err := carbon.NewUKGrid(c.Zone, opts...)
		if err != nil {
			return nil, fmt.Errorf("-%s: %w", FlagZone, err)
		}
		return p, nil
	}
	var (
		sec carbon.Secret
		err error
	)
	if c.TokenFile != "" {
		if sec, err = carbon.SecretFromFile(c.TokenFile); err != nil {
			return nil, fmt.Errorf("-%s: %w", FlagTokenFile, err)
		}
	} else if sec, err = carbon.SecretFromEnv(TokenEnv); err != nil {
		return nil, err // it names the variable
	}
	var p carbon.Provider
	switch c.Provider {
	case ProviderElectricityMaps:
		if lat, lon, ok := latLon(c.Zone); ok {
			p, err = carbon.NewElectricityMapsAt(lat, lon, sec, opts...)
		} else {
			p, err = carbon.NewElectricityMaps(c.Zone, sec, opts...)
		}
	case ProviderWattTime:
		p, err = carbon.NewWattTime(c.Zone, c.User, sec, opts...)
	default:
		err = fmt.Errorf("%w: provider %q", carbon.ErrInvalidConfig, c.Provider)
	}
	if err != nil {
		return nil, fmt.Errorf("-%s %s: %w", FlagProvider, c.Provider, err)
	}
	return p, nil
}

// latLon parses a zone given as "lat,lon" in decimal degrees: Electricity
// Maps then answers for the zone that contains the location.
func latLon(zone string) (lat, lon float64, ok bool) {
	a, b, found := strings.Cut(zone, ",")
	if !found {
		return 0, 0, false
	}
	lat, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	lon, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	return lat, lon, err1 == nil && err2 == nil
}

// Start starts polling the provider, if any. It does not wait for the
// first answer: until then the fallback, or no figure, is in force.
func (c *Carbon) Start() error {
	if c == nil || c.Poller == nil {
		return nil
	}
	return c.Poller.Start()
}

// Shutdown stops polling; the last reading stays in force. A binary
// stops it after the Monitor, so that every interval the Monitor splits
// has the reading it was metered at.
func (c *Carbon) Shutdown(ctx context.Context) error {
	if c == nil || c.Poller == nil {
		return nil
	}
	return c.Poller.Shutdown(ctx)
}

// Age returns the time since the provider's last good answer
// ([carbon.Poller.Age]); false for a static intensity and before the
// first answer.
func (c *Carbon) Age() (time.Duration, bool) {
	if c == nil || c.Poller == nil {
		return 0, false
	}
	return c.Poller.Age()
}

// Log writes the one line that says what carbon does: its source, zone,
// kind, PUE, embodied emissions and fallback; at debug level, that it is
// off. It never carries the secret.
func (c *Carbon) Log(lg *slog.Logger) {
	if c == nil {
		lg.Debug("carbon off: no -" + FlagIntensity + " or -" + FlagProvider)
		return
	}
	cf := c.cfg
	g := func(mg uint64) string { return strconv.FormatFloat(float64(mg)/1000, 'f', -1, 64) }
	attrs := []any{slog.String("pue", cf.PUE.String()),
		slog.String("embodied_g_per_hour", strconv.FormatFloat(float64(cf.Embodied)/1e6, 'f', -1, 64))}
	if cf.Provider == "" {
		lg.Info("carbon on, at a static intensity", append([]any{slog.String("source", carbon.SourceStatic),
			slog.String("kind", carbon.Average.String()), slog.String("g_per_kwh", g(cf.Intensity))}, attrs...)...)
		return
	}
	fallback := "none"
	if cf.HasIntensity {
		fallback = g(cf.Intensity) + " g/kWh"
	}
	lg.Info("carbon on, polling a provider", append([]any{slog.String("source", cf.Provider), slog.String("zone", cf.Zone),
		slog.String("kind", kindOf(cf.Provider).String())}, append(attrs,
		slog.String("fallback", fallback), slog.Duration("poll_interval", cf.PollInterval), slog.Duration("stale_after", cf.StaleAfter))...)...)
}

// kindOf is the kind of figure a provider gives.
func kindOf(provider string) carbon.Kind {
	if provider == ProviderWattTime {
		return carbon.Marginal
	}
	return carbon.Average
}
