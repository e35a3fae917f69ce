package carbon

import (
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/otelenergy/otelenergy/internal/split"
)

// Unit constants of the exact arithmetic. Energy is in mJ, intensity in
// mg CO2e per kWh, PUE in parts per million, and emissions in µg CO2e:
//
//	µg = mJ × (mg/kWh) × ppm / (3.6e9 mJ/kWh × 1e6 ppm / 1e3 µg/mg)
//	   = mJ × (mg/kWh) × ppm / 3.6e12
const (
	mJPerKWh     = 3_600_000_000 // 1 kWh = 3.6e6 J
	ppmPerUnit   = 1_000_000
	energyDen    = mJPerKWh / 1000 * ppmPerUnit // 3.6e12: see above
	nsPerHour    = uint64(time.Hour)
	maxPUEPPM    = 100 * ppmPerUnit  // a PUE above 100 is a typo
	maxMgPerKWh  = 10_000_000        // 10 kg/kWh: ten times the dirtiest grid
	maxUGPerHour = 1_000_000_000_000 // 1 t per device-hour
)

// PUE is a facility's power usage effectiveness, total facility energy
// over IT energy, in parts per million: 1.135 is 1_135_000. Its zero value
// is not valid; [ParsePUE] builds one. Cloud Carbon
// Footprint uses 1.135 for AWS, 1.1 for GCP and 1.185 for Azure.
type PUE uint64

// PUENone is a PUE of 1: the energy metered is all that is counted.
const PUENone PUE = ppmPerUnit

// ParsePUE parses a decimal PUE such as "1.135" exactly (up to six
// decimals). It returns an error wrapping [ErrInvalidConfig] for anything
// else, or for a PUE below 1 or above 100.
func ParsePUE(s string) (PUE, error) {
	v, err := parseDecimal(strings.TrimSpace(s), 6)
	if err != nil || v < ppmPerUnit || v > maxPUEPPM {
		return 0, fmt.Errorf("%w: PUE %q: want a decimal from 1 to 100, such as 1.135", ErrInvalidConfig, s)
	}
	return PUE(v), nil
}

// Float returns the PUE as a number, such as 1.135.
func (p PUE) Float() float64 { return float64(p) / ppmPerUnit }

// String returns the PUE as a decimal, such as "1.135".
func (p PUE) String() string { return formatDecimal(uint64(p), 6) }

// ParseGramsPerKWh parses a decimal intensity in g CO2e per kWh, such as
// "436" or "52.5", exactly (up to three decimals), into mg per kWh. It
// returns an error wrapping [ErrInvalidConfig] for anything else, or for
// a value above 10,000 g/kWh. Zero is allowed: a grid may be that clean.
func ParseGramsPerKWh(s string) (uint64, error) {
	v, err := parseDecimal(strings.TrimSpace(s), 3)
	if err != nil || v > maxMgPerKWh {
		return 0, fmt.Errorf("%w: carbon intensity %q: want g CO2e per kWh from 0 to 10000, such as 436", ErrInvalidConfig, s)
	}
	return v, nil
}

// ParseGramsPerHour parses embodied emissions in g CO2e per device-hour,
// such as "12.5", exactly (up to six decimals), into an [Embodied] (µg
// per hour). It returns an error wrapping [ErrInvalidConfig] for anything
// else, or for a value above 1 t per hour.
func ParseGramsPerHour(s string) (Embodied, error) {
	v, err := parseDecimal(strings.TrimSpace(s), 6)
	if err != nil || v > maxUGPerHour {
		return 0, fmt.Errorf("%w: embodied emissions %q: want g CO2e per device-hour from 0 to 1000000, such as 12.5", ErrInvalidConfig, s)
	}
	return Embodied(v), nil
}

// parseDecimal parses a plain decimal (digits, optionally a point and
// more digits) with at most scale digits after the point into an integer scaled by 10^scale.
func parseDecimal(s string, scale int) (uint64, error) {
	// big.Rat.SetString also takes signs, exponents, fractions, 0x and
	// 0b prefixes and underscores: only digits[.digits] is a decimal.
	whole, frac, dot := strings.Cut(s, ".")
	if !isDigits(whole) || (dot && !isDigits(frac)) {
		return 0, ErrInvalidConfig
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, ErrInvalidConfig
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() || !r.Num().IsUint64() {
		return 0, ErrInvalidConfig
	}
	return r.Num().Uint64(), nil
}

func formatDecimal(v uint64, scale int) string {
	p := uint64(math.Pow10(scale))
	s := fmt.Sprintf("%d.%0*d", v/p, scale, v%p)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Factor turns energy into operational emissions: an intensity times a
// PUE, resolved once so that the per-interval conversion is two integer
// multiplications and a division. A zero Factor gives zero emissions.
type Factor struct {
	num uint64 // (mg/kWh) × ppm; µg = mJ × num / energyDen
}

// NewFactor returns the factor of intensity mgPerKWh (mg CO2e per kWh, as
// [Intensity.MgPerKWh]) at PUE p. It returns an error wrapping
// [ErrInvalidConfig] for an intensity above 10 kg/kWh or a PUE outside
// [1, 100].
func NewFactor(mgPerKWh uint64, p PUE) (Factor, error) {
	if mgPerKWh > maxMgPerKWh || p < PUENone || p > maxPUEPPM {
		return Factor{}, fmt.Errorf("%w: intensity %d mg/kWh at PUE %s", ErrInvalidConfig, mgPerKWh, p)
	}
	return Factor{num: mgPerKWh * uint64(p)}, nil // ≤ 1e7 × 1e8: no overflow
}

// Of returns the emissions of mJ millijoules, in µg CO2e, rounded half
// up. It saturates at the largest uint64 rather than wrap: at the largest
// factor (10 kg/kWh at a PUE of 100) that is beyond 6.6e16 mJ, 6.6e13 J;
// no interval comes near.
func (f Factor) Of(mJ uint64) uint64 { return split.Scale(mJ, f.num, energyDen, split.HalfUp) }

// Operational converts one counter interval's energy, as the ledger split
// it, into emissions. sharesMJ holds each request's integer mJ of the
// interval and unattributedMJ the rest (whatever the caller wants counted
// apart: unattributed, other processes). It writes each request's µg
// into out, which must be at least as long as sharesMJ, and returns the
// unattributed µg.
//
// The split is by cumulative rounding: with C_k the energy of the first k
// requests, request k gets round(C_k·f) − round(C_(k-1)·f). So every
// figure is within 1 µg of its exact value, and, exactly,
//
//	Σ out + unattributed = f.Of(Σ sharesMJ + unattributedMJ),
//
// the interval's energy times its one intensity and PUE, rounded once.
// One interval has one intensity: a request that spans an intensity
// change gets each interval's figure at that interval's intensity.
// Operational allocates nothing and is safe from any goroutine. It
// panics if out is shorter than sharesMJ.
func (f Factor) Operational(sharesMJ []uint64, unattributedMJ uint64, out []uint64) (unattributed uint64) {
	clear(out[:len(sharesMJ)])
	return split.Cumulative(sharesMJ, unattributedMJ, f.num, energyDen, split.HalfUp, out)
}

// Embodied is the embodied emissions of one device per hour of its life,
// in µg CO2e per hour, as [ParseGramsPerHour] returns: the device's
// manufacturing emissions over its expected hours of service. Its zero
// value counts none.
type Embodied uint64

// Of returns the embodied emissions of d of device time, in µg, rounded
// half up.
func (e Embodied) Of(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return split.Scale(uint64(d), uint64(e), nsPerHour, split.HalfUp)
}

// Split splits one interval's embodied emissions by device time, as the
// ledger splits static power: coverNS holds each request's share of the
// interval's time in ns (at every instant the requests active then share
// it equally) and idleNS the time with no request. It writes each
// request's µg into out and returns the rest, and, exactly,
//
//	Σ out + idle = e.Of(Σ coverNS + idleNS),
//
// by the same cumulative rounding as [Factor.Operational]. It allocates
// nothing, and panics if out is shorter than coverNS.
func (e Embodied) Split(coverNS []uint64, idleNS uint64, out []uint64) (idle uint64) {
	clear(out[:len(coverNS)])
	return split.Cumulative(coverNS, idleNS, uint64(e), nsPerHour, split.HalfUp, out)
}

// Milligrams rounds µg to whole mg, half up: the unit of the
// Energy-Co2e-Milligrams trailer. Sum µg first and round once: rounding
// each interval to mg would lose a request whose share of an interval is
// below half a mg, which at 100 ms intervals is most of them.
func Milligrams(ug uint64) uint64 { return ug/1000 + (ug%1000)/500 }
