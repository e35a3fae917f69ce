package openaiproxy_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/otelenergy/otelenergy/internal/fakeclock"
	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
	"github.com/otelenergy/otelenergy/simgpu"
)

// The accuracy scenario through the proxy: clients send completions
// through the energy middleware around this package's middleware to a
// simulated engine driven by simgpu with continuous batching (every
// decoding request produces one token at each of the engine's steps, the
// whole batch at once), on a fake clock that the Monitor (sampled by
// hand, at DefaultInterval) and the simulated GPU share, so that the
// figures do not depend on the machine's speed. Each request's final
// figure is compared with simgpu's ground truth for its job. It uses only
// the public APIs of otelenergy, openaiproxy and simgpu.

// proxyScenario is one run's workload.
type proxyScenario struct {
	EndOnly  float64 // share of non-streaming clients
	Upstream bool    // WithUpstreamStreaming
	Slots    int     // clients, each sending one request after another
	Step     time.Duration
	// Output tokens and prompt tokens per request, drawn uniformly.
	MinOut, MaxOut       int
	MinPrompt, MaxPrompt int
	MaxGap               time.Duration
	Duration             time.Duration // how long requests keep arriving
	Periods              []time.Duration
	Seed                 uint64
}

var proxyAccuracyBase = proxyScenario{
	Slots: 16, Step: 25 * time.Millisecond,
	MinOut: 40, MaxOut: 320, MinPrompt: 50, MaxPrompt: 1000,
	MaxGap: 200 * time.Millisecond, Duration: 60 * time.Second,
	Periods: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond},
	Seed:    7,
}

// engineRequest is one request as the simulated engine serves it. The
// driver hands it each step's token and waits until the handler has
// written it (and the proxy read it) before time moves on.
type engineRequest struct {
	job        *simgpu.Job
	out        int
	produced   int
	firstToken time.Time
	step       chan bool // true: one token; false: finish
	ack        chan struct{}
	done       chan struct{} // closed when the client's request has ended
	req        *otelenergy.Request
}

// engine is the simulated backend: one job per request on the GPU, the
// output written as the client asked (a stream, or one body at the end).
type engine struct {
	gpu     *simgpu.GPU
	arrived chan *engineRequest
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	stream := strings.Contains(string(body), `"stream":true`)
	usage := strings.Contains(string(body), `"include_usage":true`)
	prompt, _ := strconv.Atoi(r.Header.Get("X-Prompt"))
	out, _ := strconv.Atoi(r.Header.Get("X-Out"))
	er := &engineRequest{job: e.gpu.Begin(prompt), out: out, step: make(chan bool), ack: make(chan struct{})}
	er.firstToken = er.job.FirstTokenAt()
	e.arrived <- er
	var rc *http.ResponseController
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		rc = http.NewResponseController(w)
	}
	for <-er.step {
		er.job.Tokens(1)
		er.produced++
		if stream {
			io.WriteString(w, chatChunk("tok "))
			rc.Flush()
		}
		er.ack <- struct{}{}
	}
	if stream {
		io.WriteString(w, finishChunk())
		if usage {
			io.WriteString(w, usageChunk(prompt, er.produced))
		}
		io.WriteString(w, done)
	} else {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatJSON(prompt, er.produced))
	}
	er.job.End()
}

// proxyFigures are a scenario's errors against the truth, in %.
type proxyFigures struct {
	n                     int
	mean, p99             float64
	endOnlyMean, ep99     float64 // over the non-streaming clients alone
	streamMean, streamP99 float64
}

func runProxyAccuracy(tb testing.TB, sc proxyScenario) proxyFigures {
	tb.Helper()
	var all, endOnly, streaming []float64
	for k, p := range sc.Periods {
		a, e, s := runProxyAccuracyOnce(tb, sc, p, sc.Seed*100+uint64(k))
		all, endOnly, streaming = append(all, a...), append(endOnly, e...), append(streaming, s...)
	}
	f := proxyFigures{n: len(all)}
	f.mean, f.p99 = meanP99(all)
	f.endOnlyMean, f.ep99 = meanP99(endOnly)
	f.streamMean, f.streamP99 = meanP99(streaming)
	return f
}

// meanP99 returns the mean and the 99th percentile of |xs|.
func meanP99(xs []float64) (mean, p99 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := make([]float64, len(xs))
	var sum float64
	for i, x := range xs {
		s[i] = math.Abs(x)
		sum += s[i]
	}
	slices.Sort(s)
	return sum / float64(len(s)), s[max(int(math.Ceil(0.99*float64(len(s))))-1, 0)]
}

func runProxyAccuracyOnce(tb testing.TB, sc proxyScenario, period time.Duration, seed uint64) (all, endOnly, streaming []float64) {
	clock := fakeclock.New(fakeclock.Epoch()) // the run's time, advanced by the driver alone
	gpu, err := simgpu.New(simgpu.Config{UpdatePeriod: period, Seed: seed, Now: clock.Now, DecodeStep: sc.Step})
	if err != nil {
		tb.Fatal(err)
	}
	mon, err := otelenergy.NewMonitor(gpu, otelenergy.WithClock(clock.Now), otelenergy.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		tb.Fatal(err)
	}
	defer mon.Shutdown(context.Background())
	eng := &engine{gpu: gpu, arrived: make(chan *engineRequest)}
	proxy := openaiproxy.NewMiddleware(mon, openaiproxy.WithMeterProvider(noop.NewMeterProvider()),
		openaiproxy.WithUpstreamStreaming(sc.Upstream))(eng)
	var current atomic.Pointer[otelenergy.Request]
	energy := otelenergy.NewMiddleware(mon)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Store(otelenergy.RequestFromContext(r.Context()))
		proxy.ServeHTTP(w, r)
	}))
	rng := rand.New(rand.NewPCG(seed, 0x9a0))
	type client struct {
		free    int64 // ms at which the next request starts
		er      *engineRequest
		endOnly bool
	}
	clients := make([]client, sc.Slots)
	for i := range clients {
		clients[i].free = 1000 + rng.Int64N(sc.MaxGap.Milliseconds()+1)
	}
	type finished struct {
		er      *engineRequest
		endOnly bool
	}
	var ended []finished
	stepMS, sampleMS := sc.Step.Milliseconds(), otelenergy.DefaultInterval.Milliseconds()
	durMS, horizonMS := sc.Duration.Milliseconds(), int64(12_000)
	lastEnd := int64(0)
	for ms := int64(0); ; ms++ {
		clock.Set(fakeclock.Epoch().Add(time.Duration(ms) * time.Millisecond))
		now := clock.Now()
		for i := range clients {
			c := &clients[i]
			if c.er == nil && ms >= c.free && ms < durMS+1000 {
				c.endOnly = rng.Float64() < sc.EndOnly
				c.er = startProxyRequest(energy, eng, &current, rng, sc, c.endOnly)
			}
		}
		if ms%stepMS == 0 {
			// One engine step: every request past its prefill produces
			// one token, the batch at once.
			for i := range clients {
				c := &clients[i]
				if c.er == nil || now.Before(c.er.firstToken) {
					continue
				}
				c.er.step <- true
				<-c.er.ack
				if c.er.produced == c.er.out {
					c.er.step <- false
					<-c.er.done
					ended = append(ended, finished{c.er, c.endOnly})
					c.er, c.free, lastEnd = nil, ms+1+rng.Int64N(sc.MaxGap.Milliseconds()+1), ms
				}
			}
		}
		if ms%sampleMS == 0 {
			mon.Sample()
		}
		if ms > durMS+1000 && ms > lastEnd+horizonMS && !slices.ContainsFunc(clients, func(c client) bool { return c.er != nil }) {
			break
		}
	}
	for _, f := range ended {
		truth := f.er.job.TrueEnergyMJ()
		res := f.er.req.End()
		if truth <= 0 || !res.HasEnergy {
			continue
		}
		e := (float64(res.EnergyMJ) - truth) / truth * 100
		all = append(all, e)
		if f.endOnly {
			endOnly = append(endOnly, e)
		} else {
			streaming = append(streaming, e)
		}
	}
	return all, endOnly, streaming
}

// startProxyRequest sends one client's request through the proxy, in a
// goroutine of its own as a server would, and returns once the engine
// has begun its job.
func startProxyRequest(h http.Handler, eng *engine, current *atomic.Pointer[otelenergy.Request], rng *rand.Rand, sc proxyScenario, endOnly bool) *engineRequest {
	prompt := sc.MinPrompt + rng.IntN(sc.MaxPrompt-sc.MinPrompt+1)
	out := sc.MinOut + rng.IntN(sc.MaxOut-sc.MinOut+1)
	// Four bytes of text per prompt token: the proxy's estimate of a
	// streamed prompt is then its size, and the usage confirms it.
	body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":%q}]}`, model, !endOnly, strings.Repeat("abcd", prompt))
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("X-Prompt", strconv.Itoa(prompt))
	r.Header.Set("X-Out", strconv.Itoa(out))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
	}()
	er := <-eng.arrived
	er.req, er.done = current.Load(), done
	return er
}

// BenchmarkProxyAccuracy reports, for 30% and for every client
// non-streaming, with upstream streaming on and off, the error of each
// request's final figure through the proxy against simgpu's ground
// truth, pooled over counter periods of 20, 50 and 100 ms: err%-mean and
// err%-p99 over every request, and over the non-streaming clients alone
// (err%-ns-mean, err%-ns-p99). The figures are the ledger's of the day:
// they move with it; docs/proxy.md gives them.
func BenchmarkProxyAccuracy(b *testing.B) {
	for _, c := range []struct {
		name     string
		endOnly  float64
		upstream bool
	}{
		{"endonly30/upstream", 0.3, true},
		{"endonly30/plain", 0.3, false},
		{"endonly-all/upstream", 1, true},
		{"endonly-all/plain", 1, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			sc := proxyAccuracyBase
			sc.EndOnly, sc.Upstream = c.endOnly, c.upstream
			var f proxyFigures
			for range b.N {
				f = runProxyAccuracy(b, sc)
			}
			b.ReportMetric(f.mean, "err%-mean")
			b.ReportMetric(f.p99, "err%-p99")
			b.ReportMetric(f.endOnlyMean, "err%-ns-mean")
			b.ReportMetric(f.ep99, "err%-ns-p99")
			b.ReportMetric(float64(f.n), "requests")
			b.Logf("%s: %d requests, error mean %.2f%% p99 %.2f%%; non-streaming clients %.2f%% / %.2f%%, streaming %.2f%% / %.2f%%",
				c.name, f.n, f.mean, f.p99, f.endOnlyMean, f.ep99, f.streamMean, f.streamP99)
		})
	}
}
