package attrib_test

import (
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/attrib"
	"github.com/otelenergy/otelenergy/cmd/otelenergy-agent/internal/procshare"
)

// TestNeverIdleFlushAndHold: a board busy at 300 W throughout (its true
// idle power is 50 W), its samples 600 ms late, a listing that fails
// every 5 s (the agent then flushes what is held), and once a hold that
// expires before the late samples come. No interval of it is idle, so no
// idle power may be learned from the intervals split before their
// samples came.
func TestNeverIdleFlushAndHold(t *testing.T) {
	for _, hold := range []int64{2000 * ms, 400 * ms} {
		b := attrib.New(attrib.Config{Hold: time.Duration(hold)})
		var r attrib.Result
		for pass := range 60 {
			b.Listed(1) // as the agent does before each pass's Push
			t0 := int64(pass) * 1000 * ms
			var ivs []procshare.Interval
			for k := range 10 {
				ivs = append(ivs, procshare.Interval{T0: t0 + int64(k)*100*ms, T1: t0 + int64(k+1)*100*ms, EnergyMJ: 30_000})
			}
			b.Push(ivs)
			now := t0 + 1000*ms
			var ss []attrib.Sample
			for k := range 6 { // 1/6 s samples up to 600 ms ago
				at := now - 600*ms - int64(5-k)*1000*ms/6
				if at > 0 {
					ss = append(ss, attrib.Sample{Pid: 7, T1: at, SM: 90})
				}
			}
			b.AddSamples(ss)
			if pass%5 == 4 {
				b.Split(0, true, &r) // the listing failed
				continue
			}
			b.Split(now, false, &r)
		}
		if w, src, _ := b.Idle(); src == attrib.IdleIntervals || w > 100 {
			t.Errorf("hold %d ms: learned idle %.0f W from %s, want none learned from intervals (truth 50 W)",
				hold/ms, w, attrib.IdleSourceNames[src])
		}
	}
}
