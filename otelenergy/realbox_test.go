package otelenergy

import (
	"context"
	"math"
	"testing"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/simgpu"
)

// TestFuncSourceCounterAnomalies reads counter series as a real box shows
// them, at a fixed cadence: a one-read drop to zero and a 1 mJ step back
// are not energy, and are counted and exported.
func TestFuncSourceCounterAnomalies(t *testing.T) {
	tests := []struct {
		name   string
		series []uint64
		want   func(DeviceStats) bool
	}{
		{"glitch to zero", []uint64{5e9, 5e9 + 100, 0, 5e9 + 200}, func(s DeviceStats) bool { return s.Glitches+s.Resets+s.Jitters > 0 }},
		{"1 mJ jitter", []uint64{5e9, 5e9 + 100, 5e9 + 99, 5e9 + 200}, func(s DeviceStats) bool { return s.Jitters == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd, mp := newReader()
			clock := newFakeClock()
			i := 0
			src, err := NewFuncSource([]Device{{ID: "bmc", Type: "cpu"}}, func(int) (uint64, error) {
				v := tt.series[min(i, len(tt.series)-1)]
				i++
				return v, nil
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mp))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Shutdown(context.Background())
			for range tt.series {
				m.Sample()
				clock.Advance(step)
			}
			if got := m.Totals().EnergyMJ[0]; got != 200 {
				t.Errorf("Totals = %d mJ, want 200", got)
			}
			rm := collect(t, rd)
			if got := floatPoints(t, rm, "hw.energy", semconv.HwTypeKey)["cpu"]; got != 0.2 {
				t.Errorf("hw.energy{hw.type=cpu} = %v J, want 0.2", got)
			}
			if w := floatPoints(t, rm, "hw.power", semconv.HwIDKey)["bmc"]; w < 0 || w > 1 {
				t.Errorf("hw.power = %v W, want about 0.67 W", w)
			}
			st := m.Stats().Devices[0]
			if !tt.want(st) {
				t.Errorf("stats %+v do not count the anomaly", st)
			}
			var exported int64
			for _, v := range intPoints(t, rm, "otelenergy.sampler.anomalies", anomalyKey) {
				exported += v
			}
			if want := int64(st.Wraps + st.Resets + st.Jitters + st.Glitches); exported != want || want == 0 {
				t.Errorf("otelenergy.sampler.anomalies sum to %d, stats %+v", exported, st)
			}
			if _, ok := findMetric(rm, "otelenergy.sampler.duration"); !ok {
				t.Error("otelenergy.sampler.duration not exported")
			}
		})
	}
}

// sharedGPU is a simulated GPU that other processes use too.
type sharedGPU struct {
	*simgpu.GPU
	share source.Share
}

func (s *sharedGPU) Share(int) source.Share { return s.share }

var _ source.Sharer = (*sharedGPU)(nil)

// TestSharedBoard: with a measured share, requests and unattributed get
// exactly that share of each step, other processes the rest, and hw.energy
// stays the whole board; without one, spans are marked shared and
// approximate.
func TestSharedBoard(t *testing.T) {
	t.Run("split", func(t *testing.T) {
		rd, mp := newReader()
		clock := newFakeClock()
		gpu, err := simgpu.New(ideal(simgpu.Config{Now: clock.Now}))
		if err != nil {
			t.Fatal(err)
		}
		src := &sharedGPU{GPU: gpu, share: source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.3}}
		m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(context.Background())
		r := &testRig{m: m, gpu: gpu, clock: clock}
		r.m.Sample()
		req := m.StartRequest(context.Background())
		for range 10 {
			m.AddTokens(req, 1)
			r.tick(step)
		}
		req.End()
		r.settle(t)
		l := m.ledger
		attributable := req.st.EnergyMJ() + l.Unattributed()
		if attributable+l.OtherProcesses() != l.SplitMJ() {
			t.Fatalf("request %d + unattributed %d + other %d != split %d", req.st.EnergyMJ(), l.Unattributed(), l.OtherProcesses(), l.SplitMJ())
		}
		if want := uint64(math.Floor(0.3 * float64(l.SplitMJ()))); attributable > want || attributable+uint64(r.m.Ring0Len()) < want {
			t.Errorf("attributable %d mJ, want floor(30%% of %d) = %d per step", attributable, l.SplitMJ(), want)
		}
		rm := collect(t, rd)
		if got := floatPoints(t, rm, "hw.energy", semconv.HwIDKey)[gpu.Devices()[0].ID]; got != float64(m.Totals().EnergyMJ[0])/1000 {
			t.Errorf("hw.energy = %v J, want the whole board's %v J", got, float64(m.Totals().EnergyMJ[0])/1000)
		}
		if got := floatPoints(t, rm, "otelenergy.energy.other_processes", "")[""]; got != float64(l.OtherProcesses())/1000 {
			t.Errorf("otelenergy.energy.other_processes = %v J, want %v", got, float64(l.OtherProcesses())/1000)
		}
		if got := intPoints(t, rm, "otelenergy.device.processes", semconv.HwIDKey)[gpu.Devices()[0].ID]; got != 2 {
			t.Errorf("otelenergy.device.processes = %d, want 2", got)
		}
	})
	t.Run("unsplit", func(t *testing.T) {
		sr, tp := newTracing()
		clock := newFakeClock()
		gpu, err := simgpu.New(ideal(simgpu.Config{Now: clock.Now}))
		if err != nil {
			t.Fatal(err)
		}
		src := &sharedGPU{GPU: gpu, share: source.Share{Processes: 2, Shared: true}}
		m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(mpNoop()))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown(context.Background())
		m.Sample()
		ctx, span := tp.Tracer("t").Start(context.Background(), "req")
		req := m.StartRequest(ctx)
		for range 5 {
			m.AddTokens(req, 1)
			clock.Advance(step)
			m.Sample()
		}
		m.finish(req)
		span.End()
		a := spanAttrs(sr.Ended()[0])
		if !a["otelenergy.energy.shared"].AsBool() || !a["otelenergy.energy.approximate"].AsBool() {
			t.Errorf("span on an unsplit shared board: shared=%v approximate=%v, want both true",
				a["otelenergy.energy.shared"], a["otelenergy.energy.approximate"])
		}
	})
}
