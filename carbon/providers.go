package carbon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	_ Provider = (*ElectricityMaps)(nil)
	_ Provider = (*WattTime)(nil)
	_ Provider = (*UKGrid)(nil)
	_ Provider = Static{}
	_ Reader   = (*Poller)(nil)
	_ Reader   = Static{}
	_ Reader   = (*Model)(nil)
)

// The base URLs of the providers' public APIs.
const (
	electricityMapsURL = "https://api.electricitymaps.com/v3"
	wattTimeURL        = "https://api.watttime.org"
	ukGridURL          = "https://api.carbonintensity.org.uk"
)

// ElectricityMaps is a [Provider] for the Electricity Maps API v3: GET
// {base}/carbon-intensity/latest?zone=Z with the token in the auth-token
// header. Its figure is an average in g CO2e per kWh, hourly: lifecycle
// emissions unless the account is set to direct ones (the answer's
// emissionFactorType, which this package does not read). Build it with
// [NewElectricityMaps] for a zone, or [NewElectricityMapsAt] for a
// location (?lat=..&lon=..). Build it with [NewElectricityMaps]. It is safe for
// concurrent use.
type ElectricityMaps struct {
	c     client
	zone  string     // "" when asked by location
	query url.Values // zone, or lat and lon; read-only after construction
	label string     // the zone, or "lat,lon", for errors
	token Secret
}

// NewElectricityMaps returns a provider for zone (an Electricity Maps zone
// key such as "DE", "FR" or "US-CAL-CISO"), authenticated by token. The
// base URL defaults to https://api.electricitymaps.com/v3. It returns an error wrapping
// [ErrInvalidConfig] for an empty zone or token.
func NewElectricityMaps(zone string, token Secret, opts ...ClientOption) (*ElectricityMaps, error) {
	zone = strings.TrimSpace(zone)
	if zone == "" {
		return nil, fmt.Errorf("%w: %s needs a zone, such as DE", ErrInvalidConfig, SourceElectricityMaps)
	}
	if token.IsZero() {
		return nil, fmt.Errorf("%w: %s needs a token", ErrInvalidConfig, SourceElectricityMaps)
	}
	c, err := newClient(SourceElectricityMaps, electricityMapsURL, true, opts)
	if err != nil {
		return nil, err
	}
	return &ElectricityMaps{c: c, zone: zone, query: url.Values{"zone": {zone}}, label: zone, token: token}, nil
}

// NewElectricityMapsAt returns a provider for the zone that contains the
// location lat, lon (decimal degrees, WGS 84), authenticated by token;
// each figure's Zone is the zone Electricity Maps answers. The base URL
// defaults to https://api.electricitymaps.com/v3. It returns an error
// wrapping [ErrInvalidConfig] for a latitude outside [-90, 90], a
// longitude outside [-180, 180], or an empty token; a location in no zone
// fails at fetch with [ErrUnknownZone].
func NewElectricityMapsAt(lat, lon float64, token Secret, opts ...ClientOption) (*ElectricityMaps, error) {
	if !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180) {
		return nil, fmt.Errorf("%w: %s location %v, %v: want a latitude in [-90, 90] and a longitude in [-180, 180]", ErrInvalidConfig, SourceElectricityMaps, lat, lon)
	}
	if token.IsZero() {
		return nil, fmt.Errorf("%w: %s needs a token", ErrInvalidConfig, SourceElectricityMaps)
	}
	c, err := newClient(SourceElectricityMaps, electricityMapsURL, true, opts)
	if err != nil {
		return nil, err
	}
	la, lo := strconv.FormatFloat(lat, 'f', -1, 64), strconv.FormatFloat(lon, 'f', -1, 64)
	return &ElectricityMaps{c: c, query: url.Values{"lat": {la}, "lon": {lo}}, label: la + "," + lo, token: token}, nil
}

// emLatest is the documented shape of carbon-intensity/latest.
type emLatest struct {
	Zone            string   `json:"zone"`
	CarbonIntensity *float64 `json:"carbonIntensity"`
	Datetime        string   `json:"datetime"`
}

// granularity is how long one figure describes: an hour from At.
func (p *ElectricityMaps) granularity() time.Duration { return time.Hour }

// Intensity fetches the zone's latest intensity.
func (p *ElectricityMaps) Intensity(ctx context.Context) (Intensity, error) {
	var v emLatest
	err := p.c.get(ctx, "/carbon-intensity/latest", p.query,
		func(h http.Header) { h.Set("auth-token", p.token.value()) }, &v)
	if err != nil {
		return Intensity{}, err
	}
	if v.CarbonIntensity == nil {
		return Intensity{}, fmt.Errorf("%w: %s: no carbonIntensity for %s", ErrMalformed, p.c.name, p.label)
	}
	mg, err := p.c.gramsToMg(*v.CarbonIntensity, "carbonIntensity")
	if err != nil {
		return Intensity{}, err
	}
	zone := p.zone
	if zone == "" {
		// Asked by location: the zone is the provider's answer.
		if zone = v.Zone; zone == "" {
			zone = p.label
		}
	}
	return Intensity{MgPerKWh: mg, Kind: Average, Source: SourceElectricityMaps, Zone: zone, At: parseTime(v.Datetime)}, nil
}

// WattTime is a [Provider] for the WattTime API v3's marginal operating
// emissions rate (MOER, signal co2_moer): it logs in with HTTP basic auth
// at {base}/login for a bearer token (valid 30 minutes; it logs in again
// after 25, or once on a 401), then reads the first point of
// {base}/v3/forecast?region=R&signal_type=co2_moer, the MOER now, in
// lbs CO2 per MWh. Its figure is marginal. The forecast is
// for subscribers; CAISO_NORTH is open to every account.
// /v3/signal-index is not used: it is a percentile, not an intensity.
// Build it with [NewWattTime]. It is safe for concurrent use: fetches
// take turns, so that one login serves them.
type WattTime struct {
	c        client
	region   string
	user     string
	password Secret

	mu      sync.Mutex // guards token and tokenAt: Intensity's callers may differ
	token   Secret     // the bearer token: a Secret, so that printing p does not show it
	tokenAt time.Time
}

// tokenLife is how long a WattTime token is used: they last 30 minutes.
const tokenLife = 25 * time.Minute

// NewWattTime returns a provider for region (a WattTime region such as
// "CAISO_NORTH") with the account user and password. The base URL
// defaults to https://api.watttime.org. It returns an error wrapping
// [ErrInvalidConfig] for an empty region, user or password.
func NewWattTime(region, user string, password Secret, opts ...ClientOption) (*WattTime, error) {
	region = strings.TrimSpace(region)
	if region == "" || user == "" || password.IsZero() {
		return nil, fmt.Errorf("%w: %s needs a region, a user and a password", ErrInvalidConfig, SourceWattTime)
	}
	c, err := newClient(SourceWattTime, wattTimeURL, true, opts)
	if err != nil {
		return nil, err
	}
	return &WattTime{c: c, region: region, user: user, password: password}, nil
}

type wtLogin struct {
	Token string `json:"token"`
}

type wtForecast struct {
	Data []struct {
		PointTime string   `json:"point_time"`
		Value     *float64 `json:"value"`
	} `json:"data"`
	Meta struct {
		Units string `json:"units"`
	} `json:"meta"`
}

// lbsPerMWhToMg is mg/kWh per lb/MWh: 453.59237 g per lb, 1000 kWh per MWh.
const lbsPerMWhToMg = 453.59237

// granularity is how long one figure describes: five minutes from At.
func (p *WattTime) granularity() time.Duration { return 5 * time.Minute }

// Intensity fetches the region's MOER now.
func (p *WattTime) Intensity(ctx context.Context) (Intensity, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if p.token.IsZero() || p.c.now().Sub(p.tokenAt) > tokenLife {
			if err := p.login(ctx); err != nil {
				return Intensity{}, err
			}
		}
		it, err := p.forecast(ctx)
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusUnauthorized && attempt == 0 {
			p.token = Secret{} // expired early: log in once more
			continue
		}
		return it, err
	}
}

func (p *WattTime) login(ctx context.Context) error {
	var v wtLogin
	err := p.c.get(ctx, "/login", nil, func(h http.Header) {
		r := http.Request{Header: h}
		r.SetBasicAuth(p.user, p.password.value())
	}, &v)
	if se := (*StatusError)(nil); errors.As(err, &se) && se.kind == ErrUnknownZone {
		se.kind = ErrUnauthorized // /login knows no zone
	}
	if err != nil {
		return err
	}
	if v.Token == "" {
		return fmt.Errorf("%w: %s: login answered no token", ErrUnauthorized, p.c.name)
	}
	tok := v.Token
	p.token, p.tokenAt = Secret{get: func() string { return tok }}, p.c.now()
	return nil
}

func (p *WattTime) forecast(ctx context.Context) (Intensity, error) {
	var v wtForecast
	// The query is the official Python client's: region and signal type.
	// The answer is the next 24 hours in 5-minute points (a few tens of
	// kB); the first is now.
	q := url.Values{"region": {p.region}, "signal_type": {"co2_moer"}}
	err := p.c.get(ctx, "/v3/forecast", q, func(h http.Header) { h.Set("Authorization", "Bearer "+p.token.value()) }, &v)
	if err != nil {
		return Intensity{}, err
	}
	if len(v.Data) == 0 || v.Data[0].Value == nil {
		return Intensity{}, fmt.Errorf("%w: %s: no forecast point for region %s", ErrMalformed, p.c.name, p.region)
	}
	var mgPer float64
	switch v.Meta.Units {
	case "lbs_co2_per_mwh":
		mgPer = lbsPerMWhToMg
	case "g_co2_per_kwh":
		mgPer = 1000
	default:
		return Intensity{}, fmt.Errorf("%w: %s: unknown units %q", ErrMalformed, p.c.name, v.Meta.Units)
	}
	mg, err := p.c.scaleToMg(*v.Data[0].Value, mgPer, "value")
	if err != nil {
		return Intensity{}, err
	}
	return Intensity{MgPerKWh: mg, Kind: Marginal, Source: SourceWattTime, Zone: p.region, At: parseTime(v.Data[0].PointTime)}, nil
}

// UKGrid is a [Provider] for the Carbon Intensity API of Great Britain's
// electricity system operator (National Grid ESO, now NESO): no key, GB
// only, average, half-hourly. Zone "GB" reads {base}/intensity (the
// national figure: its actual when published, else its forecast); a
// region id from 1 to 17 reads {base}/regional/regionid/N (regional
// figures are forecasts). Build it with [NewUKGrid]. It is safe for
// concurrent use.
type UKGrid struct {
	c        client
	zone     string
	regional bool
}

// NewUKGrid returns a provider for zone "GB" (in any case) or a region
// id ("13" is London; "013" is the same region and reads as "13"). The
// base URL defaults to https://api.carbonintensity.org.uk. It returns an error wrapping
// [ErrInvalidConfig] for anything else, an empty zone included; a region
// id the API does not know fails at fetch with [ErrUnknownZone].
func NewUKGrid(zone string, opts ...ClientOption) (*UKGrid, error) {
	zone = strings.TrimSpace(zone)
	p := &UKGrid{}
	if strings.EqualFold(zone, "GB") {
		p.zone = "GB"
	} else {
		n, err := strconv.ParseUint(zone, 10, 16)
		if err != nil || n == 0 || !isDigits(zone) {
			return nil, fmt.Errorf("%w: %s zone %q: want GB or a region id such as 13", ErrInvalidConfig, SourceUKGrid, zone)
		}
		p.zone, p.regional = strconv.FormatUint(n, 10), true
	}
	c, err := newClient(SourceUKGrid, ukGridURL, false, opts)
	if err != nil {
		return nil, err
	}
	p.c = c
	return p, nil
}

type ukPeriod struct {
	From      string `json:"from"`
	Intensity struct {
		Forecast *float64 `json:"forecast"`
		Actual   *float64 `json:"actual"`
	} `json:"intensity"`
}

type ukNational struct {
	Data []ukPeriod `json:"data"`
}

type ukRegional struct {
	Data []struct {
		RegionID int        `json:"regionid"`
		Data     []ukPeriod `json:"data"`
	} `json:"data"`
}

// granularity is how long one figure describes: half an hour from At.
func (p *UKGrid) granularity() time.Duration { return 30 * time.Minute }

// Intensity fetches the current half hour's intensity.
func (p *UKGrid) Intensity(ctx context.Context) (Intensity, error) {
	var period *ukPeriod
	if p.regional {
		var v ukRegional
		if err := p.c.get(ctx, "/regional/regionid/"+p.zone, nil, nil, &v); err != nil {
			return Intensity{}, err
		}
		if len(v.Data) > 0 && len(v.Data[0].Data) > 0 {
			period = &v.Data[0].Data[0]
		}
	} else {
		var v ukNational
		if err := p.c.get(ctx, "/intensity", nil, nil, &v); err != nil {
			return Intensity{}, err
		}
		if len(v.Data) > 0 {
			period = &v.Data[0]
		}
	}
	if period == nil {
		return Intensity{}, fmt.Errorf("%w: %s: no period for zone %s", ErrMalformed, p.c.name, p.zone)
	}
	g := period.Intensity.Actual
	if g == nil {
		g = period.Intensity.Forecast
	}
	if g == nil {
		return Intensity{}, fmt.Errorf("%w: %s: no intensity for zone %s", ErrMalformed, p.c.name, p.zone)
	}
	mg, err := p.c.gramsToMg(*g, "intensity")
	if err != nil {
		return Intensity{}, err
	}
	return Intensity{MgPerKWh: mg, Kind: Average, Source: SourceUKGrid, Zone: p.zone, At: parseTime(period.From)}, nil
}
