package otelenergy

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/ledger"
	"github.com/otelenergy/otelenergy/ring"
	"github.com/otelenergy/otelenergy/simgpu"
)

// TestNilMonitor calls every exported method of a nil *Monitor: a service
// whose Monitor could not be built serves normally, and each method returns
// its documented zero result or error.
func TestNilMonitor(t *testing.T) {
	var m *Monitor
	ctx := context.Background()
	tests := []struct {
		name string
		call func(t *testing.T)
	}{
		{"Start", func(t *testing.T) {
			if err := m.Start(); !errors.Is(err, ErrClosed) {
				t.Fatalf("Start = %v, want ErrClosed", err)
			}
		}},
		{"Shutdown", func(t *testing.T) {
			if err := m.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown = %v, want nil", err)
			}
		}},
		{"Sample", func(*testing.T) { m.Sample() }},
		{"AddTokens", func(*testing.T) { m.AddTokens(ctx, 3) }},
		{"AddInputTokens", func(*testing.T) { m.AddInputTokens(ctx, 3) }},
		{"StartRequest", func(t *testing.T) {
			req := m.StartRequest(ctx)
			if req == nil {
				t.Fatal("StartRequest returned nil")
			}
			m.AddTokens(req, 1)
			if RequestFromContext(req) != req {
				t.Fatal("the Request does not carry itself")
			}
			if res := req.End(); res != (Result{}) {
				t.Fatalf("End = %+v, want the zero Result", res)
			}
		}},
		{"BeginRun", func(t *testing.T) {
			if r := m.BeginRun("m"); r != nil {
				t.Fatalf("BeginRun = %v, want nil", r)
			}
		}},
		{"Run", func(t *testing.T) {
			if r := m.Run(); r != nil {
				t.Fatalf("Run = %v, want nil", r)
			}
		}},
		{"Totals", func(t *testing.T) {
			if s := m.Totals(); s.T != 0 || s.EnergyMJ != nil || s.OutputTokens != 0 || s.InputTokens != 0 || s.UnattributedMJ != 0 {
				t.Fatalf("Totals = %+v, want the zero Snapshot", s)
			}
		}},
		{"Resource", func(t *testing.T) {
			if r := m.Resource(); r == nil || r.Len() != 0 {
				t.Fatalf("Resource = %v, want an empty resource", r)
			}
		}},
		{"Devices", func(t *testing.T) {
			if d := m.Devices(); d != nil {
				t.Fatalf("Devices = %v, want nil", d)
			}
		}},
		{"Ring", func(t *testing.T) {
			v, err := m.view(0)
			if !errors.Is(err, ErrInvalidDevice) || v.Len() != 0 {
				t.Fatalf("Ring(0) = %d points, %v; want an empty view and ErrInvalidDevice", v.Len(), err)
			}
		}},
		{"Stats", func(t *testing.T) {
			if s := m.Stats(); !reflect.DeepEqual(s, Stats{}) {
				t.Fatalf("Stats = %+v, want the zero Stats", s)
			}
		}},
		{"RunMeterProvider", func(t *testing.T) {
			mp, err := m.RunMeterProvider(nil, nil)
			if mp != nil || !errors.Is(err, ErrClosed) {
				t.Fatalf("RunMeterProvider = %v, %v; want nil, ErrClosed", mp, err)
			}
		}},
		{"NewSpanExporter", func(t *testing.T) {
			inmem := tracetest.NewInMemoryExporter()
			if got := NewSpanExporter(inmem, m); got != sdktrace.SpanExporter(inmem) {
				t.Fatalf("NewSpanExporter(exp, nil) = %T, want exp itself", got)
			}
		}},
		{"NewMiddleware", func(t *testing.T) {
			served := false
			h := NewMiddleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				m.AddTokens(r.Context(), 1)
				served = true
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			if !served {
				t.Fatal("handler not served")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.call)
	}
}

func TestRingRejectsInvalidDevice(t *testing.T) {
	r := newRig(t, ideal(simgpu.Config{Devices: 2}))
	for _, i := range []int{-1, 2} {
		if _, err := r.m.view(i); !errors.Is(err, ErrInvalidDevice) {
			t.Errorf("Ring(%d) = %v, want ErrInvalidDevice", i, err)
		}
	}
	if _, err := r.m.view(1); err != nil {
		t.Errorf("Ring(1) = %v", err)
	}
	// The view hands out no way to write: the sampler stays the ring's
	// single writer.
	if _, ok := reflect.TypeOf(ring.View{}).MethodByName("Push"); ok {
		t.Error("ring.View has a Push method")
	}
}

// TestShutdownWithRequestsInFlightConcurrentSafe shuts a sampling Monitor
// down while goroutines start requests, report tokens and end them, with
// the span exporter waiting for figures: no race, no panic, and (through
// goleak) no goroutine left behind.
func TestShutdownWithRequestsInFlightConcurrentSafe(t *testing.T) {
	gpu, err := simgpu.New(simgpu.Config{UpdatePeriod: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(gpu, WithMeterProvider(sdkmetric.NewMeterProvider()), WithHorizon(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, tp := newTracing(sdktrace.WithBatcher(NewSpanExporter(tracetest.NewInMemoryExporter(), m), sdktrace.WithBatchTimeout(5*time.Millisecond)))
	defer tp.Shutdown(context.Background())
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	h := NewMiddleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.AddInputTokens(r.Context(), 4)
		m.AddTokens(r.Context(), 2)
	}))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, span := tp.Tracer("t").Start(context.Background(), "req")
				if g%2 == 0 {
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
				} else {
					req := m.StartRequest(ctx)
					m.AddTokens(req, 1)
					req.End()
				}
				span.End()
				if i%64 == 0 {
					m.BeginRun("m")
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // requests keep arriving after Shutdown
	close(stop)
	wg.Wait()
	if res := m.StartRequest(context.Background()).End(); res.HasEnergy {
		t.Fatalf("a request after Shutdown got energy: %+v", res)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedRequestsCounted starts one request more than the ledger's
// limit: it gets no energy, and it is counted.
func TestDroppedRequestsCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 65,537 requests")
	}
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	r.m.Sample()
	const extra = 3
	reqs := make([]*Request, ledger.DefaultMaxActive+extra)
	for i := range reqs {
		reqs[i] = r.m.StartRequest(context.Background())
	}
	r.tick(step)
	if got := r.m.Stats().DroppedRequests; got != extra {
		t.Fatalf("DroppedRequests = %d, want %d", got, extra)
	}
	if got := intPoints(t, collect(t, rd), "otelenergy.requests.dropped", reasonKey)["capacity"]; got != extra {
		t.Fatalf("otelenergy.requests.dropped{reason=capacity} = %d, want %d", got, extra)
	}
	withEnergy := 0
	for _, q := range reqs {
		if q.End().HasEnergy {
			withEnergy++
		}
	}
	if withEnergy != ledger.DefaultMaxActive {
		t.Fatalf("%d requests got energy, want %d", withEnergy, ledger.DefaultMaxActive)
	}
}

// TestNeverEndedRequestExpires leaves a request open past the maximum age
// of an hour: it stops accruing and is counted.
func TestNeverEndedRequestExpires(t *testing.T) {
	rd, mp := newReader()
	r := newRig(t, ideal(simgpu.Config{}), WithMeterProvider(mp))
	r.m.Sample()
	req := r.m.StartRequest(context.Background())
	r.tick(step)
	r.tick(time.Hour)
	if got := r.m.Stats().ExpiredRequests; got != 1 {
		t.Fatalf("ExpiredRequests = %d, want 1", got)
	}
	if got := intPoints(t, collect(t, rd), "otelenergy.requests.dropped", reasonKey)["expired"]; got != 1 {
		t.Fatalf("otelenergy.requests.dropped{reason=expired} = %d, want 1", got)
	}
	r.settle(t)
	if !req.st.Final() || req.st.Flags()&ledger.FlagExpired == 0 {
		t.Fatalf("final=%v flags=%b; want final and expired", req.st.Final(), req.st.Flags())
	}
	got := req.st.EnergyMJ()
	r.tick(time.Minute)
	if req.st.EnergyMJ() != got {
		t.Fatalf("an expired request kept accruing: %d -> %d mJ", got, req.st.EnergyMJ())
	}
	if res := req.End(); !res.Approximate {
		t.Fatalf("an expired request's figure is not approximate: %+v", res)
	}
}

// readOnlySpan builds an ended span.
func readOnlySpan(t *testing.T, tp *sdktrace.TracerProvider) sdktrace.ReadOnlySpan {
	t.Helper()
	_, s := tp.Tracer("t").Start(context.Background(), "req")
	s.End()
	return s.(sdktrace.ReadOnlySpan)
}

// TestSpanExporterDoesNotWaitOnStalledSampler ends request spans and then
// stops sampling: ExportSpans must pass them on without holding the batch.
func TestSpanExporterDoesNotWaitOnStalledSampler(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}))
	rig.m.Sample()
	tp := sdktrace.NewTracerProvider()
	inmem := tracetest.NewInMemoryExporter()
	exp := NewSpanExporter(inmem, rig.m)
	var spans []sdktrace.ReadOnlySpan
	for range 5 {
		req := rig.m.StartRequest(context.Background())
		rig.m.AddTokens(req, 2)
		req.End()
		s := readOnlySpan(t, tp)
		rig.m.pending.put(s.SpanContext().SpanID(), req.st, rig.m.now())
		spans = append(spans, s)
	}
	rig.clock.Advance(2 * time.Second) // many intervals without a sample
	start := time.Now()
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("ExportSpans held the batch %v with the sampler stalled", d)
	}
	if n := len(inmem.GetSpans()); n != 5 {
		t.Fatalf("exported %d spans, want 5", n)
	}
}

// TestPendingSpansSweep checks that spans that never reach the exporter
// (here: registered, never exported) are bounded and do not fill the table
// for good.
func TestPendingSpansSweep(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}))
	rig.m.Sample()
	NewSpanExporter(tracetest.NewInMemoryExporter(), rig.m)
	const limit = pendingShards * maxPendingPerShard
	req := rig.m.StartRequest(context.Background())
	req.End()
	for i := range limit + 10 {
		var sid trace.SpanID
		binary.LittleEndian.PutUint64(sid[:], uint64(i)+1)
		rig.m.pending.put(sid, req.st, rig.m.now())
	}
	count := func() int {
		n := 0
		for i := range rig.m.pending.shards {
			s := &rig.m.pending.shards[i]
			s.mu.Lock()
			n += len(s.spans)
			s.mu.Unlock()
		}
		return n
	}
	if n := count(); n != limit {
		t.Fatalf("%d pending spans, want the limit %d", n, limit)
	}
	rig.tick(pendingHorizon + time.Second)
	if n := count(); n != 0 {
		t.Fatalf("%d pending spans left after the horizon", n)
	}
}

// TestShutdownDoesNotWaitOnHungRead shuts down while a device read hangs:
// Shutdown returns at its context's deadline, and the source is closed once
// the read returns.
func TestShutdownDoesNotWaitOnHungRead(t *testing.T) {
	release := make(chan struct{})
	closed := make(chan struct{})
	reads := 0
	src, err := NewFuncSource([]Device{{ID: "d"}}, func(int) (uint64, error) {
		reads++
		if reads == 3 {
			<-release
		}
		return uint64(reads) * 100, nil
	}, func() error { close(closed); return nil })
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMonitor(src, WithInterval(20*time.Millisecond), WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the sampler is stuck in its third read
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := m.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown took %v past a 50 ms context", d)
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("source not closed after the hung read returned")
	}
}

// TestShutdownFinalizesEndedRequests ends a request at a counter step and
// shuts down: the last sample gives it its final, exact figure.
func TestShutdownFinalizesEndedRequests(t *testing.T) {
	rig := newRig(t, ideal(simgpu.Config{}))
	rig.m.Sample()
	req := rig.m.StartRequest(context.Background())
	job := rig.gpu.Begin(0)
	job.Tokens(5)
	rig.m.AddTokens(req, 5)
	rig.tick(step)
	job.Tokens(5)
	rig.m.AddTokens(req, 5)
	rig.clock.Advance(step)
	job.End()
	req.End()
	if err := rig.m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !req.st.Final() || req.st.Flags()&ledger.FlagFlushed != 0 {
		t.Fatalf("final=%v flags=%b; want finalized by a last sample, not flushed", req.st.Final(), req.st.Flags())
	}
	// Alone on the GPU, it earned every millijoule of both intervals.
	if got, want := req.st.EnergyMJ(), rig.m.Totals().TotalEnergyMJ(); got != want {
		t.Fatalf("final energy %d mJ, metered %d mJ", got, want)
	}
}
