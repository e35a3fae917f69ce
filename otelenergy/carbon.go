package otelenergy

import (
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/ledger"
)

// co2State is a Monitor's emissions bookkeeping, with [WithCarbon]. The
// sampler notes the reading in force at every pass ([carbon.Model.Note]),
// and the ledger hands it every interval it splits for good
// (ledger.Config.OnSplit), which it converts at the reading in force when
// the interval was metered ([carbon.Model.Interval]): each request's µg
// are added to its state, the rest to unattributed. So, interval by
// interval, Σ request µg + unattributed µg is the interval's energy times
// its one intensity and the PUE, rounded once, plus its embodied
// emissions: exactly what package carbon guarantees, with nothing lost
// in between.
type co2State struct {
	model *carbon.Model
	// unattributed holds the µg that went to no request: the emissions of
	// unattributed energy and of other processes' share of shared
	// devices, and the embodied emissions of idle time.
	unattributed atomic.Uint64

	// Sampler-only: Interval's scratch, and the request histogram's
	// attribute sets (finalize runs on the sampler's side, under
	// sampleMu).
	op, emb []uint64
	sets    map[co2SetKey]metric.RecordOption
	recOpts [1]metric.RecordOption // the histogram Record's options

	gauge atomic.Pointer[co2Gauge] // the intensity gauge's attributes, for the last reading observed
}

// co2SetKey names a request histogram's attribute set: the energy
// histogram's set plus the reading's source and kind.
type co2SetKey struct {
	base   attribute.Distinct
	source string
	kind   carbon.Kind
}

// maxCo2Sets bounds the sets kept: the energy histogram's sets are
// bounded (runs, baggage, models), and so are sources and kinds, but a
// long-lived process sees many runs. Past it the cache starts afresh.
const maxCo2Sets = 4096

type co2Gauge struct {
	r   *carbon.Reading
	opt metric.ObserveOption
}

// Request state flags for emissions.
const (
	// co2Met: an interval of the request was converted at a reading.
	co2Met uint32 = 1 << iota
	// co2Unknown: an interval that gave the request energy had no reading
	// known exactly for its time (none in force, or older than the
	// model's timeline keeps): its figure is approximate.
	co2Unknown
)

// carbonModels holds the models a live Monitor converts with. A Model's
// timeline is noted on its Monitor's clock and its Interval is not safe
// for concurrent use, so a second Monitor on the same Model would race
// with the first and convert on the wrong clock: NewMonitor refuses it.
var carbonModels sync.Map // *carbon.Model → struct{}

func claimCarbon(m *carbon.Model) error {
	if _, taken := carbonModels.LoadOrStore(m, struct{}{}); taken {
		return fmt.Errorf("%w: the carbon.Model is in use by another Monitor; give each Monitor its own (they may share a Poller)", ErrInvalidConfig)
	}
	return nil
}

// releaseCarbon frees m for another Monitor, once its own has stopped
// converting. A nil m is a no-op.
func releaseCarbon(m *carbon.Model) {
	if m != nil {
		carbonModels.Delete(m)
	}
}

func newCo2State(model *carbon.Model) *co2State {
	if model == nil {
		return nil
	}
	return &co2State{model: model, sets: map[co2SetKey]metric.RecordOption{}}
}

// convertSplit is the ledger's OnSplit hook: it converts one interval, as
// split, into emissions, and adds each request's to its state. It runs on
// the sampler's side and allocates nothing once its scratch has grown to
// the most requests an interval held.
func (m *Monitor) convertSplit(_ int, a, b int64, reqs []*ledger.Account, sharesMJ []uint64, restMJ uint64, coverNS []uint64) {
	c := m.co2
	n := len(sharesMJ)
	if cap(c.op) < n {
		c.op, c.emb = make([]uint64, n, 2*n), make([]uint64, n, 2*n)
	}
	op, emb := c.op[:n], c.emb[:n]
	res := c.model.Interval(a, b, sharesMJ, restMJ, coverNS, op, emb)
	rest := res.OperationalRest + res.EmbodiedRest
	for i, r := range reqs {
		st, ok := r.Data.(*requestState)
		if !ok {
			rest += op[i] + emb[i] // no request of this Monitor's: unreachable
			continue
		}
		ug := op[i] + emb[i]
		if res.Reading == nil {
			// No intensity in force: the request carries no figure for
			// this interval (HasCo2e stays as its other intervals say), so
			// its embodied share is unattributed rather than held where
			// no span or histogram would ever show it.
			rest += ug
			ug = 0
		}
		if ug != 0 {
			st.co2UG.Add(ug)
		}
		var f uint32
		if res.Reading != nil {
			f |= co2Met
			st.co2Last = res.Reading
		}
		if !res.Known && sharesMJ[i] > 0 {
			f |= co2Unknown
		}
		if f != 0 && st.co2Flags.Load()&f != f {
			st.co2Flags.Or(f)
		}
	}
	if rest != 0 {
		c.unattributed.Add(rest)
	}
}

// requestCo2e returns a request's emissions in µg as known now, and
// whether there is a figure. ug and flags are its state's, loaded before
// its split energy splitMJ; final says its figure is final (loaded true
// before ug), and otherwise estimateMJ is its energy estimate, whose
// part not split yet is converted at the reading in force now.
func (c *co2State) requestCo2e(ug uint64, flags uint32, final bool, splitMJ, estimateMJ uint64) (uint64, bool) {
	has := flags&co2Met != 0
	if !final && estimateMJ > splitMJ {
		if e, ok := c.model.Estimate(estimateMJ - splitMJ); ok {
			return ug + e, true
		}
	}
	return ug, has || c.model.Current() != nil
}

// reading returns the reading a final request's emissions are recorded
// under: its last interval's, or, when none of its intervals met one,
// the one in force now (nil when none). Sampler side.
func (st *requestState) reading(c *co2State) *carbon.Reading {
	if st.co2Last != nil {
		return st.co2Last
	}
	return c.model.Current()
}

// recordOpt returns the request histogram's record option: the energy
// histogram's attributes, base, plus r's source and kind. The intensity's
// value and zone are never attributes: they would make a series per
// figure. Sampler side.
func (c *co2State) recordOpt(base metric.RecordOption, r *carbon.Reading) metric.RecordOption {
	set := metric.NewRecordConfig([]metric.RecordOption{base}).Attributes()
	k := co2SetKey{base: set.Equivalent(), source: r.Source, kind: r.Kind}
	if opt, ok := c.sets[k]; ok {
		return opt
	}
	if len(c.sets) >= maxCo2Sets {
		clear(c.sets)
	}
	attrs := append(set.ToSlice(), carbonSourceKey.String(r.Source), carbonKindKey.String(r.Kind.String()))
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	c.sets[k] = opt
	return opt
}

// gaugeOpt returns the intensity gauge's attributes for r, built again
// only when the reading changes. Safe from any goroutine.
func (c *co2State) gaugeOpt(r *carbon.Reading) metric.ObserveOption {
	if g := c.gauge.Load(); g != nil && g.r == r {
		return g.opt
	}
	g := &co2Gauge{r: r, opt: metric.WithAttributeSet(attribute.NewSet(
		carbonSourceKey.String(r.Source), carbonKindKey.String(r.Kind.String())))}
	c.gauge.Store(g)
	return g.opt
}
