package simgpu_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/internal/source"
	"github.com/otelenergy/otelenergy/simgpu"
)

// Board 0 draws 100 W with steps every 100 ms from creation: a read at
// 250 ms returns initial + 20 000, at 350 ms initial + 30 000.
func TestFaults(t *testing.T) {
	type step struct {
		ms      float64
		inject  func(g *simgpu.GPU)
		want    uint64
		wantErr error
	}
	for _, tc := range []struct {
		name  string
		cfg   simgpu.Config
		steps []step
	}{
		{"reset", simgpu.Config{}, []step{
			{ms: 250, want: initial + 20_000},
			{ms: 280, inject: func(g *simgpu.GPU) { g.InjectReset(0) }, want: 0},
			{ms: 299, want: 0},
			{ms: 350, want: 10_000},
		}},
		{"reset before a read sees the step", simgpu.Config{}, []step{
			{ms: 150, want: initial + 10_000},
			{ms: 250, inject: func(g *simgpu.GPU) { g.InjectReset(0) }, want: 0},
			{ms: 350, want: 10_000},
		}},
		{"wrap", simgpu.Config{CounterMax: initial + 25_000}, []step{
			{ms: 250, want: initial + 20_000},
			{ms: 350, want: 4_999},
		}},
		{"read errors", simgpu.Config{}, []step{
			{ms: 150, inject: func(g *simgpu.GPU) { g.InjectReadErrors(0, 2) }, wantErr: source.ErrRead},
			{ms: 250, wantErr: source.ErrRead},
			{ms: 350, want: initial + 30_000},
		}},
		{"lost", simgpu.Config{}, []step{
			{ms: 150, want: initial + 10_000},
			{ms: 250, inject: func(g *simgpu.GPU) { g.InjectLost(0) }, wantErr: source.ErrDeviceLost},
			{ms: 350, wantErr: source.ErrDeviceLost},
		}},
		{"closed", simgpu.Config{}, []step{
			{ms: 150, inject: func(g *simgpu.GPU) { g.Close(); g.Close() }, wantErr: source.ErrUnavailable},
		}},
		{"jitter", simgpu.Config{}, []step{
			{ms: 250, inject: func(g *simgpu.GPU) { g.InjectJitter(0, 5) }, want: initial + 20_000 - 5},
			{ms: 260, want: initial + 20_000},
		}},
		{"jitter through zero", simgpu.Config{CounterMax: math.MaxUint32, InitialCounter: 1}, []step{
			{ms: 50, inject: func(g *simgpu.GPU) { g.InjectJitter(0, 3) }, want: math.MaxUint32 - 1},
			{ms: 60, want: 1},
		}},
		{"glitch", simgpu.Config{}, []step{
			{ms: 250, inject: func(g *simgpu.GPU) { g.InjectGlitch(0, 1e9) }, want: initial + 20_000 + 1e9},
			{ms: 260, want: initial + 20_000},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Phase = 100 * time.Millisecond
			g, clk := newGPU(t, tc.cfg)
			for _, s := range tc.steps {
				at(clk, s.ms)
				if s.inject != nil {
					s.inject(g)
				}
				got, err := g.ReadEnergy(0)
				if !errors.Is(err, s.wantErr) || (s.wantErr == nil && got != s.want) {
					t.Fatalf("read at %v ms = %d, %v; want %d, %v", s.ms, got, err, s.want, s.wantErr)
				}
			}
			// Faults touch readings, never the truth.
			if got, want := g.TrueEnergyMJ(0), uint64(100*tc.steps[len(tc.steps)-1].ms); got != want {
				t.Fatalf("TrueEnergyMJ = %d, want %d", got, want)
			}
		})
	}
}

func TestReadOutOfRange(t *testing.T) {
	g, _ := newGPU(t, simgpu.Config{Devices: 2})
	for _, i := range []int{-1, 2} {
		if _, err := g.ReadEnergy(i); !errors.Is(err, source.ErrRead) {
			t.Fatalf("ReadEnergy(%d) error %v, want ErrRead", i, err)
		}
	}
}

func TestSourceContract(t *testing.T) {
	g, _ := newGPU(t, simgpu.Config{Devices: 3, MaxWatts: 900, CounterMax: 1 << 40})
	if g.Kind() != "simulated" {
		t.Fatalf("Kind = %q", g.Kind())
	}
	devs := g.Devices()
	if len(devs) != 3 {
		t.Fatalf("%d devices", len(devs))
	}
	ids := map[string]bool{}
	for i, d := range devs {
		if d.Index != i || d.HWType() != "gpu" || d.PowerBound() != 900 || d.CounterMax != 1<<40 || d.ID == "" {
			t.Fatalf("device %d = %+v", i, d)
		}
		ids[d.ID] = true
	}
	if len(ids) != 3 {
		t.Fatalf("device IDs repeat: %v", ids)
	}
	devs[0].ID = "changed"
	if g.Devices()[0].ID == "changed" {
		t.Fatal("Devices returns the GPU's own slice")
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  simgpu.Config
	}{
		{"devices", simgpu.Config{Devices: -1}},
		{"too many devices", simgpu.Config{Devices: simgpu.MaxDevices + 1}},
		{"idle", simgpu.Config{IdleWatts: -1}},
		{"NaN token", simgpu.Config{JoulesPerToken: math.NaN()}},
		{"inf input token", simgpu.Config{JoulesPerInputToken: math.Inf(1)}},
		{"prefill watts", simgpu.Config{PrefillWatts: -5}},
		{"prefill base", simgpu.Config{PrefillBase: -time.Millisecond}},
		{"prefill per token", simgpu.Config{PrefillPerInputToken: -time.Millisecond}},
		{"prefill quadratic", simgpu.Config{PrefillPerSquaredKTokens: -time.Millisecond}},
		{"prefill spread", simgpu.Config{PrefillSpread: 1}},
		{"prefill power spread", simgpu.Config{PrefillPowerSpread: 1}},
		{"short period", simgpu.Config{UpdatePeriod: time.Microsecond}},
		{"long period", simgpu.Config{UpdatePeriod: 2 * time.Second}},
		{"phase", simgpu.Config{Phase: -time.Millisecond}},
		{"jitter", simgpu.Config{UpdateJitter: 50 * time.Millisecond}},
		{"negative jitter", simgpu.Config{UpdateJitter: -1}},
		{"lag", simgpu.Config{ReportLag: 11 * time.Second}},
		{"negative lag", simgpu.Config{ReportLag: -1}},
		{"gain", simgpu.Config{Gain: -1}},
		{"gain spread", simgpu.Config{GainSpread: 1}},
		{"noise", simgpu.Config{Noise: 1}},
		{"max watts", simgpu.Config{MaxWatts: -1}},
		{"initial above max", simgpu.Config{CounterMax: 10, InitialCounter: 11}},
		{"decode model", simgpu.Config{Decode: 7}},
		{"prefill share", simgpu.Config{PrefillShare: -1}},
		{"decode step", simgpu.Config{DecodeStep: -1}},
		{"window", simgpu.Config{CounterWindow: 101 * time.Millisecond}},
		{"curve batch", simgpu.Config{DecodeCurve: []simgpu.BatchPower{{0, 10}}}},
		{"curve order", simgpu.Config{DecodeCurve: []simgpu.BatchPower{{4, 10}, {4, 20}}}},
		{"curve watts", simgpu.Config{DecodeCurve: []simgpu.BatchPower{{1, math.NaN()}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := simgpu.New(tc.cfg); !errors.Is(err, simgpu.ErrInvalidConfig) {
				t.Fatalf("New error %v, want ErrInvalidConfig", err)
			}
		})
	}
	g, err := simgpu.New(simgpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config()
	if c.Devices != 1 || c.IdleWatts != 100 || c.JoulesPerToken != 0.02 || c.PrefillWatts != 300 ||
		c.Decode != simgpu.DecodeBatch || len(c.DecodeCurve) != len(simgpu.DefaultDecodeCurve) || c.DecodeStep != 25*time.Millisecond ||
		c.UpdatePeriod != 100*time.Millisecond || c.Gain != 1 || c.InitialCounter != initial || c.Now == nil {
		t.Fatalf("defaults = %+v", c)
	}
}
