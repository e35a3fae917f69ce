package carbonconf

import (
	"fmt"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/internal/cli"
)

// Flag names, as both binaries declare them.
const (
	FlagIntensity    = "carbon-intensity"
	FlagProvider     = "carbon-provider"
	FlagZone         = "carbon-zone"
	FlagPUE          = "pue"
	FlagEmbodied     = "embodied-g-per-hour"
	FlagTokenFile    = "carbon-token-file"
	FlagUser         = "carbon-user"
	FlagPollInterval = "carbon-poll-interval"
	FlagStaleAfter   = "carbon-stale-after"
)

// TokenEnv is the environment variable that holds the provider's secret
// (Electricity Maps' token, WattTime's password) when -carbon-token-file
// does not name a file. It is not a flag's variable: no flag takes a
// secret.
const TokenEnv = "OTELENERGY_CARBON_TOKEN"

// Providers, as -carbon-provider names them.
const (
	ProviderElectricityMaps = "electricitymaps"
	ProviderWattTime        = "watttime"
	ProviderUKGrid          = "ukgrid"
)

// Config is the value of the carbon flags. Its zero value is not the
// defaults; [Flags]' entries set them as a table parses.
type Config struct {
	// Intensity is -carbon-intensity in mg CO2e per kWh, when
	// HasIntensity: the static intensity, or the provider's fallback.
	Intensity    uint64
	HasIntensity bool
	Provider     string          // -carbon-provider: "" (static only) or a Provider* constant
	Zone         string          // -carbon-zone
	PUE          carbon.PUE      // -pue
	Embodied     carbon.Embodied // -embodied-g-per-hour, µg per device-hour
	TokenFile    string          // -carbon-token-file
	User         string          // -carbon-user: WattTime's account name
	PollInterval time.Duration   // -carbon-poll-interval
	StaleAfter   time.Duration   // -carbon-stale-after
}

// Enabled reports whether the flags turn carbon on.
func (c Config) Enabled() bool { return c.HasIntensity || c.Provider != "" }

// Flags returns the carbon flags' entries for a binary's table over its
// configuration C, whose carbon part get returns. Each entry's check
// wraps [carbon.ErrInvalidConfig].
func Flags[C any](get func(*C) *Config) []cli.Flag[C] {
	return []cli.Flag[C]{
		{Name: FlagIntensity, Usage: "grid carbon intensity in g CO2e/kWh, such as 436: alone it turns carbon on, at this static figure; with -carbon-provider it is the fallback before the provider's first answer and once its figure is stale (empty: carbon off, or no fallback)",
			Set: func(c *C, v string) error {
				cc := get(c)
				if v == "" {
					cc.Intensity, cc.HasIntensity = 0, false
					return nil
				}
				mg, err := carbon.ParseGramsPerKWh(v)
				if err != nil {
					return err
				}
				cc.Intensity, cc.HasIntensity = mg, true
				return nil
			}},
		{Name: FlagProvider, Usage: "where the intensity comes from, polled: electricitymaps (average, token), watttime (marginal MOER, -carbon-user and password) or ukgrid (GB, average, no key); the token or password is read from " + TokenEnv + " or -carbon-token-file (empty: the static -carbon-intensity only)",
			Set: func(c *C, v string) error {
				switch v {
				case "", ProviderElectricityMaps, ProviderWattTime, ProviderUKGrid:
					get(c).Provider = v
					return nil
				}
				return fmt.Errorf("%w: want electricitymaps, watttime or ukgrid", carbon.ErrInvalidConfig)
			}},
		{Name: FlagZone, Usage: "the provider's zone: an Electricity Maps zone (DE, US-CAL-CISO) or a location lat,lon (48.1,11.6), a WattTime region (CAISO_NORTH), or GB or a region id 1-17 for ukgrid",
			Set: func(c *C, v string) error { get(c).Zone = strings.TrimSpace(v); return nil }},
		{Name: FlagPUE, Default: "1", Usage: "the facility's power usage effectiveness, which multiplies the metered energy, such as 1.135 (AWS), 1.1 (GCP) or 1.185 (Azure) in Cloud Carbon Footprint's figures",
			Set: func(c *C, v string) error {
				p, err := carbon.ParsePUE(v)
				if err != nil {
					return err
				}
				get(c).PUE = p
				return nil
			}},
		{Name: FlagEmbodied, Default: "0", Usage: "embodied emissions of one GPU in g CO2e per device-hour (its manufacturing emissions over its hours of service), charged by device time",
			Set: func(c *C, v string) error {
				e, err := carbon.ParseGramsPerHour(v)
				if err != nil {
					return err
				}
				get(c).Embodied = e
				return nil
			}},
		{Name: FlagTokenFile, Usage: "file holding the provider's token (electricitymaps) or password (watttime), such as a mounted Kubernetes secret; empty reads " + TokenEnv,
			Set: func(c *C, v string) error { get(c).TokenFile = v; return nil }},
		{Name: FlagUser, Usage: "the WattTime account name, with -carbon-provider watttime",
			Set: func(c *C, v string) error { get(c).User = strings.TrimSpace(v); return nil }},
		{Name: FlagPollInterval, Default: carbon.DefaultPollInterval.String(), Usage: "how often the provider is asked; at least 1s",
			Set: func(c *C, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < time.Second {
					return fmt.Errorf("%w: want a duration of at least 1s, such as 5m", carbon.ErrInvalidConfig)
				}
				get(c).PollInterval = d
				return nil
			}},
		{Name: FlagStaleAfter, Default: carbon.DefaultStaleAfter.String(), Usage: "how old the provider's figure may get, by its last answer or the period it describes, before -carbon-intensity (or none) replaces it; longer than -carbon-poll-interval",
			Set: func(c *C, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return fmt.Errorf("%w: want a positive duration, such as 1h", carbon.ErrInvalidConfig)
				}
				get(c).StaleAfter = d
				return nil
			}},
	}
}

// Check checks the carbon flags together, after a table has parsed
// them: a provider needs a zone, a secret where it takes one (read
// through getenv for [TokenEnv], or a file), and WattTime an account
// name; flags that mean nothing without a provider, or without carbon,
// are refused rather than ignored. Its error is one line that names the
// flag and matches [cli.ErrInvalid] and [carbon.ErrInvalidConfig].
func (c Config) Check(getenv func(string) string) error {
	if c.Provider == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{FlagZone, c.Zone != ""}, {FlagUser, c.User != ""}, {FlagTokenFile, c.TokenFile != ""},
			{FlagPollInterval, c.PollInterval != carbon.DefaultPollInterval}, {FlagStaleAfter, c.StaleAfter != carbon.DefaultStaleAfter},
		} {
			if f.set {
				return invalid("-%s is set without -%s", f.name, FlagProvider)
			}
		}
		if !c.HasIntensity {
			if c.PUE != carbon.PUENone {
				return invalid("-%s is set but carbon is off: set -%s or -%s", FlagPUE, FlagIntensity, FlagProvider)
			}
			if c.Embodied != 0 {
				return invalid("-%s is set but carbon is off: set -%s or -%s", FlagEmbodied, FlagIntensity, FlagProvider)
			}
		}
		return nil
	}
	if c.Zone == "" {
		return invalid("-%s %s needs -%s", FlagProvider, c.Provider, FlagZone)
	}
	if c.StaleAfter <= c.PollInterval {
		return invalid("-%s %v is not longer than -%s %v", FlagStaleAfter, c.StaleAfter, FlagPollInterval, c.PollInterval)
	}
	envSet := strings.TrimSpace(getenv(TokenEnv)) != ""
	switch c.Provider {
	case ProviderUKGrid:
		if _, err := carbon.NewUKGrid(c.Zone); err != nil {
			return invalid("invalid value %q for -%s: want GB or a region id from 1 to 17 with -%s ukgrid", c.Zone, FlagZone, FlagProvider)
		}
		if c.User != "" || c.TokenFile != "" {
			return invalid("-%s ukgrid takes no account: drop -%s and -%s", FlagProvider, FlagUser, FlagTokenFile)
		}
		return nil
	case ProviderWattTime:
		if c.User == "" {
			return invalid("-%s watttime needs -%s, the account name", FlagProvider, FlagUser)
		}
	case ProviderElectricityMaps:
		if lat, lon, ok := latLon(c.Zone); ok && (lat < -90 || lat > 90 || lon < -180 || lon > 180) {
			return invalid("invalid value %q for -%s: a location is lat,lon with lat from -90 to 90 and lon from -180 to 180", c.Zone, FlagZone)
		}
		if c.User != "" {
			return invalid("-%s is WattTime's account name; -%s electricitymaps takes a token only", FlagUser, FlagProvider)
		}
	}
	switch {
	case c.TokenFile == "" && !envSet:
		return invalid("-%s %s needs a secret: set %s or -%s", FlagProvider, c.Provider, TokenEnv, FlagTokenFile)
	case c.TokenFile != "" && envSet:
		return invalid("both %s and -%s are set: keep one", TokenEnv, FlagTokenFile)
	}
	return nil
}

// invalid returns a one-line error matching cli.ErrInvalid and
// carbon.ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return flagError(fmt.Sprintf(format, args...))
}

type flagError string

func (e flagError) Error() string { return string(e) }
func (e flagError) Is(target error) bool {
	return target == cli.ErrInvalid || target == carbon.ErrInvalidConfig
}
