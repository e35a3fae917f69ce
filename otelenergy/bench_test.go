package otelenergy

import (
	"context"
	"go.opentelemetry.io/otel/metric/noop"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/carbon"
	"github.com/otelenergy/otelenergy/simgpu"
)

func BenchmarkAddTokens(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		// The physical floor: one bare atomic add.
		var n atomic.Uint64
		b.ReportAllocs()
		for b.Loop() {
			n.Add(1)
		}
	})
	b.Run("request", func(b *testing.B) {
		r := newRig(b, ideal(simgpu.Config{}))
		r.m.Sample()
		req := r.m.StartRequest(context.Background())
		var ctx context.Context = req
		b.ReportAllocs()
		for b.Loop() {
			r.m.AddTokens(ctx, 1)
		}
		b.StopTimer()
		req.End()
	})
	// The parallel pair: each goroutine reports to a request of its own,
	// against each goroutine adding to a counter of its own on a cache
	// line of its own. A count shared by every report would make the
	// cores contend for its line.
	b.Run("baseline-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			n := new(struct {
				atomic.Uint64
				_ [56]byte
			})
			for pb.Next() {
				n.Add(1)
			}
		})
	})
	b.Run("request-parallel", func(b *testing.B) {
		r := newRig(b, ideal(simgpu.Config{}))
		r.m.Sample()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			req := r.m.StartRequest(context.Background())
			var ctx context.Context = req
			for pb.Next() {
				r.m.AddTokens(ctx, 1)
			}
			req.End()
		})
	})
}

// dropExporter drops every span: the benchmarks measure the request path,
// not export.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

// floorMiddleware is the least any per-request energy hook must do: carry
// one value in the request context and, after the handler returns, set on
// the span the attributes the energy middleware sets for such a request
// (the run id, the output tokens, the energy and whether it is
// approximate), from constants, staged in a pooled array as the middleware
// does. The ratio of the middleware to it is then this library's own cost:
// tracking, the ledger's bookkeeping and the estimate.
type floorKey struct{}

type floorCtx struct {
	context.Context
	start int64
}

func (c *floorCtx) Value(k any) any {
	if k == (floorKey{}) {
		return c
	}
	return c.Context.Value(k)
}

const floorRunID = "0123456789abcdef0123456789abcdef"

var floorPool = sync.Pool{New: func() any { return new([4]attribute.KeyValue) }}

func floorMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &floorCtx{Context: r.Context(), start: 1}
		next.ServeHTTP(w, r.WithContext(c))
		span := trace.SpanFromContext(c)
		if !span.IsRecording() {
			return
		}
		kv := floorPool.Get().(*[4]attribute.KeyValue)
		kv[0] = runIDKey.String(floorRunID)
		kv[1] = outputTokensKey.Int64(1)
		kv[2] = EnergyMillijoulesKey.Int64(c.start)
		kv[3] = approximateKey.Bool(true)
		span.SetAttributes(kv[:]...)
		floorPool.Put(kv)
	})
}

// handlerCases builds the handlers BenchmarkHandler and
// BenchmarkHandlerParallel compare, over a Monitor on the real clock. The
// caller samples it: by hand outside the timer, or by starting it.
func handlerCases(b *testing.B) ([]*Monitor, map[string]http.Handler) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(dropExporter{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	m := realtimeMonitor(b)
	mc := realtimeMonitor(b, WithCarbon(benchCarbonModel(b)))
	handler := func(m *Monitor) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			m.AddTokens(req.Context(), 1)
			w.WriteHeader(http.StatusOK)
		})
	}
	h := handler(m)
	o := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp)}
	return []*Monitor{m, mc}, map[string]http.Handler{
		"otelhttp":               otelhttp.NewHandler(h, "op", o...),
		"floor":                  otelhttp.NewHandler(floorMiddleware(h), "op", o...),
		"otelhttp+energy":        otelhttp.NewHandler(NewMiddleware(m)(h), "op", o...),
		"otelhttp+energy+carbon": otelhttp.NewHandler(NewMiddleware(mc)(handler(mc)), "op", o...),
	}
}

// benchCarbonModel is a carbon model as a deployment builds it: a Poller
// (here polled once, over a static provider) with a PUE and embodied
// emissions, so that the request path reads the intensity as it would
// from a live provider.
func benchCarbonModel(b *testing.B) *carbon.Model {
	b.Helper()
	pl, err := carbon.NewPoller(carbon.NewStatic(carbon.Intensity{MgPerKWh: 436_000}))
	if err != nil {
		b.Fatal(err)
	}
	if err := pl.Poll(context.Background()); err != nil {
		b.Fatal(err)
	}
	model, err := carbon.NewModel(pl, carbon.WithPUE(1_135_000), carbon.WithEmbodied(12_500_000))
	if err != nil {
		b.Fatal(err)
	}
	return model
}

// BenchmarkHandler compares the energy middleware inside otelhttp with
// otelhttp alone and with the floor (otelhttp, one context value and one
// span attribute), on one goroutine. The sampler's work runs outside the
// timer, every 1024 requests, as on its own goroutine in a server;
// BenchmarkHandlerParallel runs it live.
//
// otelhttp+energy+carbon is otelhttp+energy with WithCarbon (a Poller's
// intensity, a PUE and embodied emissions): its ratio to otelhttp+energy
// is carbon's cost on the request path.
func BenchmarkHandler(b *testing.B) {
	ms, cases := handlerCases(b)
	for _, name := range []string{"otelhttp", "floor", "otelhttp+energy", "otelhttp+energy+carbon"} {
		h := cases[name]
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/v1/completions", nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h.ServeHTTP(httptest.NewRecorder(), req)
				if i%1024 == 1023 {
					b.StopTimer()
					for _, m := range ms {
						m.Sample()
					}
					b.StartTimer()
				}
			}
		})
	}
}

func BenchmarkHandlerParallel(b *testing.B) {
	ms, cases := handlerCases(b)
	for _, m := range ms {
		if err := m.Start(); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"floor", "otelhttp+energy"} {
		h := cases[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest(http.MethodGet, "/v1/completions", nil)
				for pb.Next() {
					h.ServeHTTP(httptest.NewRecorder(), req)
				}
			})
		})
	}
}

// realtimeMonitor is a Monitor on the real clock over a counter that draws
// 300 W and steps every 20 ms, as a GPU does: the request-path benchmarks
// measure the library, not a test clock's lock.
func realtimeMonitor(b *testing.B, opts ...Option) *Monitor {
	b.Helper()
	t0 := time.Now()
	src, err := NewFuncSource([]Device{{ID: "GPU-bench", Name: "bench"}}, func(int) (uint64, error) {
		steps := uint64(time.Since(t0) / (20 * time.Millisecond))
		return 1_000_000 + steps*6_000, nil // 300 W × 20 ms
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMonitor(src, append([]Option{WithMeterProvider(noop.NewMeterProvider())}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Shutdown(context.Background()) })
	m.Sample()
	return m
}

// BenchmarkStartEnd measures a bare request: StartRequest, one AddTokens
// and End. serial runs on one goroutine, sampling inline, so that its
// ns/op is a request's whole cost; path leaves the sampler's work out;
// parallel runs on every P with the real sampler running; and sampling is serial while another goroutine samples
// without pause over 10,000 other active requests that stream tokens: a
// request must never wait for the sampler's pass. Each of serial, path
// and parallel has a twin with WithCarbon, name+carbon, in the same run:
// the ratio is carbon's cost (serial+carbon includes the conversion of
// the requests' intervals).
func BenchmarkStartEnd(b *testing.B) {
	ctx := context.Background()
	// serial counts the sampler's work for its requests (adopting,
	// splitting, retiring them): its ns/op is the whole cost of a request
	// on one goroutine, which parallel must not exceed. path leaves it out.
	for _, c := range []struct {
		name         string
		timedSampler bool
		carbon       bool
	}{{"serial", true, false}, {"path", false, false}, {"serial+carbon", true, true}, {"path+carbon", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			var opts []Option
			if c.carbon {
				opts = append(opts, WithCarbon(benchCarbonModel(b)))
			}
			startEndLoop(b, ctx, realtimeMonitor(b, opts...), c.timedSampler)
		})
	}
	for _, name := range []string{"parallel", "parallel+carbon"} {
		b.Run(name, func(b *testing.B) {
			var opts []Option
			if name == "parallel+carbon" {
				opts = append(opts, WithCarbon(benchCarbonModel(b)))
			}
			m := realtimeMonitor(b, opts...)
			if err := m.Start(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := m.StartRequest(ctx)
					m.AddTokens(req, 1)
					req.End()
				}
			})
		})
	}
	b.Run("sampling", func(b *testing.B) {
		m := realtimeMonitor(b)
		others := make([]*Request, 10_000)
		for i := range others {
			others[i] = m.StartRequest(ctx)
		}
		m.Sample()
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					// The others stream: each reports a token per pass,
					// so none holds the ledger's splits back.
					for _, q := range others {
						m.AddTokens(q, 1)
					}
					m.Sample()
				}
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			req := m.StartRequest(ctx)
			m.AddTokens(req, 1)
			req.End()
		}
		b.StopTimer()
		close(done)
		wg.Wait()
		for _, q := range others {
			q.End()
		}
	})
}

// BenchmarkSamplerStep is one Sample pass over N active requests when the
// counter has not stepped: the pass every read between steps costs.
func BenchmarkSamplerStep(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			clock := newFakeClock()
			src, err := NewFuncSource([]Device{{ID: "d"}}, func(int) (uint64, error) { return 1000, nil }, nil)
			if err != nil {
				b.Fatal(err)
			}
			m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(sdkmetric.NewMeterProvider()))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Shutdown(context.Background())
			m.Sample()
			reqs := make([]*Request, n)
			for i := range reqs {
				reqs[i] = m.StartRequest(context.Background())
				m.AddTokens(reqs[i], 1)
			}
			clock.Advance(DefaultInterval)
			m.Sample() // adopts them
			b.ReportAllocs()
			for b.Loop() {
				clock.Advance(DefaultInterval)
				m.Sample()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/request")
			for _, q := range reqs {
				q.End()
			}
		})
	}
}

// BenchmarkSpanExporter exports a batch of 512 request spans whose figures
// are final through NewSpanExporter.
func BenchmarkSpanExporter(b *testing.B) {
	const batch = 512
	r := newRig(b, ideal(simgpu.Config{}), WithHorizon(time.Second))
	r.m.Sample()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	exp := NewSpanExporter(dropExporter{}, r.m)
	spans := make([]sdktrace.ReadOnlySpan, batch)
	states := make([]*requestState, batch)
	for i := range batch {
		ctx, span := tp.Tracer("b").Start(context.Background(), "req")
		req := r.m.StartRequest(ctx)
		r.m.AddTokens(req, 3)
		if i%64 == 0 {
			r.tick(step)
		}
		req.End()
		span.SetAttributes(EnergyMillijoulesKey.Int64(1), approximateKey.Bool(true))
		span.End()
		spans[i], states[i] = span.(sdktrace.ReadOnlySpan), req.st
	}
	r.settle(b)
	ctx := context.Background()
	var before, after runtime.MemStats
	b.ReportAllocs()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		b.StopTimer()
		for i, s := range spans {
			r.m.pending.put(s.SpanContext().SpanID(), states[i], r.m.now())
		}
		b.StartTimer()
		if err := exp.ExportSpans(ctx, spans); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N*batch), "allocs/span")
}

// BenchmarkSample is one sampler tick over 8 simulated GPUs.
func BenchmarkSample(b *testing.B) {
	r := newRig(b, ideal(simgpu.Config{Devices: 8}))
	r.m.Sample()
	b.ReportAllocs()
	for b.Loop() {
		r.tick(step)
	}
}

// startEndLoop runs one request per iteration on m, with a sampler pass
// every 1,024 requests, timed or not.
func startEndLoop(b *testing.B, ctx context.Context, m *Monitor, timedSampler bool) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := m.StartRequest(ctx)
		m.AddTokens(req, 1)
		req.End()
		if i%1024 == 1023 {
			if !timedSampler {
				b.StopTimer()
			}
			m.Sample()
			b.StartTimer()
		}
	}
}

// BenchmarkStartEndHost is BenchmarkStartEnd's serial and path cases
// without and with WithHostSource, in one run so that their ratio can be
// read: the host share adds no work on the request path but a larger
// allocation for the request's state, and on the sampler a host pass
// every 250 ms (its CPU times come from a function here; see
// BenchmarkHostPass for /proc).
func BenchmarkStartEndHost(b *testing.B) {
	ctx := context.Background()
	for _, host := range []bool{false, true} {
		for _, c := range []struct {
			name         string
			timedSampler bool
		}{{"serial", true}, {"path", false}} {
			name := "off/" + c.name
			if host {
				name = "on/" + c.name
			}
			b.Run(name, func(b *testing.B) {
				var opts []Option
				if host {
					opts = append(opts, benchHost(b))
				}
				startEndLoop(b, ctx, realtimeMonitor(b, opts...), c.timedSampler)
			})
		}
	}
}

// benchHost is a host of a CPU package and its DRAM at 150 W and 20 W,
// whose tree uses a third of the node's CPU time, on the real clock.
func benchHost(b *testing.B) Option {
	t0 := time.Now()
	src, err := NewFuncSource(hostDevices, func(i int) (uint64, error) {
		ms := uint64(time.Since(t0) / time.Millisecond)
		return ms * []uint64{150, 20}[i], nil
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return optionFunc(func(c *config) {
		c.host = &hostConfig{src: src, cpu: func() (uint64, uint64, error) {
			ticks := uint64(time.Since(t0) / (10 * time.Millisecond))
			return ticks, 3 * ticks, nil
		}}
	})
}

// BenchmarkHostPass is one host pass on this machine: the two counters
// of a fake host and this process's and the node's CPU time read from
// the real /proc, which is what it costs every 250 ms on the sampler.
func BenchmarkHostPass(b *testing.B) {
	src, err := NewFuncSource(hostDevices, func(int) (uint64, error) { return 0, nil }, nil)
	if err != nil {
		b.Fatal(err)
	}
	clock := newFakeClock()
	m, err := NewMonitor(src, WithClock(clock.Now), WithMeterProvider(noop.NewMeterProvider()), WithHostSource((&fakeHost{}).source(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Shutdown(context.Background()) })
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(defaultHostInterval)
		m.host.sample(m, m.now())
	}
}
