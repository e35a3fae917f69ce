package otelenergy

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/otelenergy/otelenergy/simgpu"
)

func TestNewMonitorRejectsBadConfig(t *testing.T) {
	gpu, err := simgpu.New(simgpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  Source
		opts []Option
		want []error
	}{
		{name: "nil source", src: nil, want: []error{ErrInvalidConfig}},
		{name: "interval of 5ms", src: gpu, opts: []Option{WithInterval(5 * time.Millisecond)}, want: []error{ErrInvalidConfig}},
		{name: "interval of 1ms", src: gpu, opts: []Option{WithInterval(time.Millisecond)}, want: []error{ErrInvalidConfig}},
		{name: "horizon below interval", src: gpu, opts: []Option{WithHorizon(time.Millisecond)}, want: []error{ErrInvalidConfig}},
		{name: "NaN idle power", src: gpu, opts: []Option{WithIdlePower(math.NaN())}, want: []error{ErrInvalidConfig}},
		{name: "negative idle power", src: gpu, opts: []Option{WithIdlePower(-1)}, want: []error{ErrInvalidConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMonitor(tt.src, tt.opts...)
			if m != nil {
				t.Fatal("NewMonitor returned a Monitor with an error")
			}
			for _, want := range tt.want {
				if !errors.Is(err, want) {
					t.Fatalf("error %v does not match %v", err, want)
				}
			}
		})
	}
}

func TestFuncSourceNeedsDevices(t *testing.T) {
	if _, err := NewFuncSource(nil, func(int) (uint64, error) { return 0, nil }, nil); !errors.Is(err, ErrNoDevices) {
		t.Fatalf("error = %v, want ErrNoDevices", err)
	}
	if _, err := NewFuncSource([]Device{{ID: "x"}}, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error = %v, want ErrInvalidConfig", err)
	}
	if _, err := NewFuncSource([]Device{{ID: "x", MaxWatts: -1}}, func(int) (uint64, error) { return 0, nil }, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error = %v, want ErrInvalidConfig", err)
	}
}

// TestSamplerMatchesGroundTruth checks the cumulative totals against the
// simulated boards' true energy, exactly in integer mJ, through a counter
// reset on one board and a wrap on the other.
func TestSamplerMatchesGroundTruth(t *testing.T) {
	const max = 1<<32 - 1 // a 32-bit counter, so a wrap comes quickly
	r := newRig(t, ideal(simgpu.Config{Devices: 2, CounterMax: max, InitialCounter: max - 30_000, Noise: 0.1, Seed: 3}))
	r.m.Sample() // anchors every device
	base := []uint64{r.gpu.TrueEnergyMJ(0), r.gpu.TrueEnergyMJ(1)}
	ctx := context.Background()
	job := r.gpu.Begin(0)
	for i := range 100 {
		job.Tokens(7)
		r.m.AddTokens(ctx, 7)
		r.m.AddInputTokens(ctx, 20)
		if i == 40 {
			r.gpu.InjectReset(0)
		}
		r.tick(step)
	}
	job.End()
	for i := range 2 {
		want := r.gpu.TrueEnergyMJ(i) - base[i]
		if got := r.m.Totals().EnergyMJ[i]; got != want {
			t.Errorf("device %d: total %d mJ, ground truth %d mJ", i, got, want)
		}
	}
	st := r.m.Stats()
	if st.Devices[0].Resets != 1 || st.Devices[1].Wraps != 1 {
		t.Errorf("resets on GPU 0 = %d, wraps on GPU 1 = %d; want 1 and 1", st.Devices[0].Resets, st.Devices[1].Wraps)
	}
	tot := r.m.Totals()
	if tot.OutputTokens != 700 || tot.InputTokens != 2000 {
		t.Errorf("tokens = %d out, %d in; want 700 and 2000", tot.OutputTokens, tot.InputTokens)
	}
	for i := range 2 {
		v, err := r.m.view(i)
		if err != nil {
			t.Fatal(err)
		}
		newest, _ := v.Back(0)
		if newest.EnergyMJ != tot.EnergyMJ[i] || newest.Tokens != 700 {
			t.Errorf("device %d: newest ring point %+v disagrees with totals %d mJ", i, newest, tot.EnergyMJ[i])
		}
	}
}

func TestSamplerReadErrorsLoseNoEnergy(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{Devices: 2}))
	r.m.Sample()
	base := r.gpu.TrueEnergyMJ(0)
	r.gpu.InjectReadErrors(0, 3)
	for range 10 {
		r.tick(step)
	}
	if got := r.m.Stats().Devices[0].ReadErrors; got != 3 {
		t.Fatalf("read errors = %d, want 3", got)
	}
	if got, want := r.m.Totals().EnergyMJ[0], r.gpu.TrueEnergyMJ(0)-base; got != want {
		t.Fatalf("total %d mJ after read errors, ground truth %d", got, want)
	}
}

func TestSamplerLostDevice(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{Devices: 2}))
	r.m.Sample()
	r.tick(step)
	r.gpu.InjectLost(1)
	lostAt := r.m.Totals().EnergyMJ[1]
	base0 := r.gpu.TrueEnergyMJ(0)
	before := r.m.Totals().EnergyMJ[0]
	for range 5 {
		r.tick(step)
	}
	st := r.m.Stats().Devices[1]
	if !st.Lost || st.ReadErrors != 1 {
		t.Fatalf("lost=%v errors=%d; want lost after one error", st.Lost, st.ReadErrors)
	}
	tot := r.m.Totals()
	if tot.EnergyMJ[1] != lostAt {
		t.Fatalf("lost device's total moved: %d -> %d", lostAt, tot.EnergyMJ[1])
	}
	if got, want := tot.EnergyMJ[0]-before, r.gpu.TrueEnergyMJ(0)-base0; got != want {
		t.Fatalf("healthy device advanced %d mJ, ground truth %d", got, want)
	}
}

func TestAddTokensRejectsBadCounts(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{}))
	ctx := context.Background()
	// Steps run in order against one Monitor; the wants are cumulative.
	steps := []struct {
		name       string
		add        func(context.Context, int)
		n          int
		wantOut    uint64
		wantIn     uint64
		wantReject uint64
	}{
		{name: "output", add: r.m.AddTokens, n: 5, wantOut: 5},
		{name: "zero is a no-op", add: r.m.AddTokens, n: 0, wantOut: 5},
		{name: "negative output", add: r.m.AddTokens, n: -3, wantOut: 5, wantReject: 1},
		{name: "absurd output", add: r.m.AddTokens, n: maxTokensPerCall + 1, wantOut: 5, wantReject: 2},
		{name: "largest accepted", add: r.m.AddTokens, n: maxTokensPerCall, wantOut: 5 + maxTokensPerCall, wantReject: 2},
		{name: "input", add: r.m.AddInputTokens, n: 9, wantOut: 5 + maxTokensPerCall, wantIn: 9, wantReject: 2},
		{name: "negative input", add: r.m.AddInputTokens, n: -1, wantOut: 5 + maxTokensPerCall, wantIn: 9, wantReject: 3},
	}
	for _, s := range steps {
		s.add(ctx, s.n)
		r.m.Sample() // the totals are as of the last sample
		tot := r.m.Totals()
		if rej := r.m.Stats().RejectedTokenReports; tot.OutputTokens != s.wantOut || tot.InputTokens != s.wantIn || rej != s.wantReject {
			t.Fatalf("after %q: out=%d in=%d rejected=%d; want %d, %d, %d", s.name,
				tot.OutputTokens, tot.InputTokens, rej, s.wantOut, s.wantIn, s.wantReject)
		}
	}
}

func TestStartShutdownIdempotent(t *testing.T) {
	gpu, err := simgpu.New(simgpu.Config{UpdatePeriod: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(gpu)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	v, _ := m.view(0)
	deadline := time.Now().Add(5 * time.Second)
	for v.Len() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v.Len() < 3 {
		t.Fatalf("sampler pushed %d counter steps in 5 s", v.Len())
	}
	ctx := context.Background()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := m.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown = %v, want ErrClosed", err)
	}
	if _, err := gpu.ReadEnergy(0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("source not closed by Shutdown: %v", err)
	}
	// goleak in TestMain proves the sampler goroutine is gone.
}

func TestShutdownWithoutStart(t *testing.T) {
	gpu, _ := simgpu.New(simgpu.Config{})
	m, err := NewMonitor(gpu)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorConcurrentSafe(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{Devices: 2}))
	r.m.Sample()
	var wg sync.WaitGroup
	const workers, per = 4, 2000
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				req := r.m.StartRequest(context.Background())
				r.m.AddTokens(req, 1)
				r.m.AddInputTokens(req, 2)
				if i%100 == 0 {
					r.m.BeginRun("m")
				}
				req.End()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 500 {
			r.tick(time.Millisecond)
			r.m.Run().Since(r.m.Totals())
			r.m.Stats()
		}
	}()
	wg.Wait()
	r.m.Sample() // token totals are as of the last sample
	tot := r.m.Totals()
	if tot.OutputTokens != workers*per || tot.InputTokens != 2*workers*per {
		t.Fatalf("tokens %d/%d, want %d/%d", tot.OutputTokens, tot.InputTokens, workers*per, 2*workers*per)
	}
}
