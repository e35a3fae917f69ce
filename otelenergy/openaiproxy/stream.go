package openaiproxy

import (
	"bytes"
	"context"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/internal/reqcarbon"
)

// Response modes.
const (
	modeNone = iota // not read: an error status, an unknown type, or given up
	modeSSE         // text/event-stream
	modeJSON        // a whole JSON body
)

// exchange is one completion request and its response as they pass. It is
// used by the goroutine serving the request; ReverseProxy's flush timer only
// calls Flush, which touches none of its state.
type exchange struct {
	h     *handler
	ctx   context.Context
	op    string
	start time.Time
	req   requestInfo
	strip bool // the usage rewrite was made, so its chunk is removed
	rw    responseWriter

	status int
	mode   int

	sse  sseFramer // SSE mode: the stream's events
	done bool      // [DONE] or a finish_reason was seen

	body []byte // JSON mode: the body so far
	over bool   // JSON mode: the body passed the bound

	chunk         chunkInfo
	respModel     string
	inReported    int64
	outReported   int64
	usageIn       int64
	usageOut      int64
	hasUsage      bool
	inputSent     bool
	firstToken    time.Time
	lastToken     time.Time
	unparsedNoted bool
}

// unparsed counts one unparsed response for reason. An exchange is counted
// once, under the first reason.
func (ex *exchange) unparsed(reason string) {
	if ex.unparsedNoted {
		return
	}
	ex.unparsedNoted = true
	ex.h.inst.unparsed.Add(ex.ctx, 1, ex.h.inst.reasonOpt[reason])
}

// giveUp stops reading the response; what was counted stays. In SSE
// mode the framer stops too, passing on what it held.
func (ex *exchange) giveUp(reason string) {
	if ex.mode == modeSSE {
		ex.sse.stop(reason) // calls sseStopped
		return
	}
	ex.sseStopped(reason)
}

// sseStopped implements sseConsumer: the response is no longer read.
func (ex *exchange) sseStopped(reason string) {
	ex.unparsed(reason)
	ex.body = nil
	ex.mode = modeNone
}

// begin chooses how to read the response from its status and headers.
func (ex *exchange) begin(status int) {
	ex.status = status
	hdr := ex.rw.w.Header()
	if ex.h.cfg.trailers {
		// Trailers need a chunked HTTP/1.1 body: a stated length would
		// end the response before them.
		hdr.Del("Content-Length")
		hdr.Add("Trailer", trailerNames)
		if reqcarbon.On(ex.ctx) {
			hdr.Add("Trailer", TrailerCo2e)
		}
	}
	if status < 200 || status >= 300 {
		return
	}
	ct, _, _ := mime.ParseMediaType(hdr.Get("Content-Type"))
	switch ct {
	case "text/event-stream":
		ex.mode = modeSSE
	case "application/json":
		ex.mode = modeJSON
	default:
		return
	}
	if ce := hdr.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		ex.mode = modeNone
		ex.unparsed(ReasonContentEncoding)
		return
	}
	if ex.mode == modeSSE {
		ex.sse = sseFramer{out: ex.rw.w, strip: ex.strip, c: ex}
	}
	if ex.mode == modeSSE && ex.strip {
		// Removing the usage chunk shortens the body, so the backend's
		// length would cut the client's stream short.
		hdr.Del("Content-Length")
	}
}

// write passes p to the client and reads it. Outside strip mode the client's
// bytes are written before they are read.
func (ex *exchange) write(p []byte) (int, error) {
	switch ex.mode {
	case modeSSE:
		if ex.strip {
			if err := ex.feed(p); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		n, err := ex.rw.w.Write(p)
		ex.feed(p[:n])
		return n, err
	case modeJSON:
		n, err := ex.rw.w.Write(p)
		if !ex.over {
			if len(ex.body)+n > ex.h.cfg.maxBody {
				ex.over, ex.body = true, nil
				ex.unparsed(ReasonTooLarge)
			} else {
				ex.body = append(ex.body, p[:n]...)
			}
		}
		return n, err
	}
	return ex.rw.w.Write(p)
}

// feed passes p through the framer, which calls sseEvent for each event.
// A panic in reading is a bug: the exchange stops reading and the stream
// passes on.
func (ex *exchange) feed(p []byte) (err error) {
	defer func() {
		if recover() != nil {
			ex.giveUp(ReasonInternal)
		}
	}()
	return ex.sse.feed(p)
}

var doneMarker = []byte("[DONE]")

// sseEvent implements sseConsumer: it reads one event's data, reports
// its tokens, and says whether the event is the usage chunk to remove.
func (ex *exchange) sseEvent(data []byte) (drop bool) {
	if bytes.Equal(data, doneMarker) {
		ex.done = true
		return false
	}
	c := &ex.chunk
	if err := scanChunk(data, c); err != nil {
		ex.giveUp(ReasonMalformed)
		return false
	}
	ex.noteModel(c)
	if c.finished {
		ex.done = true
	}
	if c.contentChoices > 0 || (c.hasChoices && c.choices > 0 && !ex.inputSent) {
		ex.sendInputEstimate()
	}
	if n := c.contentChoices; n > 0 {
		now := ex.h.cfg.now()
		if ex.firstToken.IsZero() {
			ex.firstToken = now
		}
		ex.lastToken = now
		ex.h.mon.AddTokens(ex.ctx, n)
		ex.outReported += int64(n)
	}
	if c.hasUsage {
		ex.reconcile(c.promptTokens, c.completion)
	}
	return ex.strip && c.hasUsage && c.hasChoices && c.choices == 0
}

// sendInputEstimate reports the prompt estimate once, at the first chunk:
// prefill happens before it.
func (ex *exchange) sendInputEstimate() {
	if ex.inputSent {
		return
	}
	ex.inputSent = true
	if n := ex.req.inputEst; n > 0 {
		ex.h.mon.AddInputTokens(ex.ctx, n)
		ex.inReported += int64(n)
	}
}

// reconcile raises the reported counts to the usage the server states.
// Counts cannot be taken back, so an estimate above usage stays and is
// counted in otelenergy.proxy.tokens.overcount when the exchange ends.
func (ex *exchange) reconcile(in, out int64) {
	ex.inputSent = true
	if in > plausibleTokens || out > plausibleTokens {
		// Not a usage any server reports: keep what was counted.
		ex.unparsed(ReasonMalformed)
		return
	}
	ex.hasUsage = true
	ex.usageIn, ex.usageOut = in, out
	if d := in - ex.inReported; d > 0 {
		addCapped(ex, d, true)
		ex.inReported = in
	}
	if d := out - ex.outReported; d > 0 {
		addCapped(ex, d, false)
		ex.outReported = out
	}
}

// plausibleTokens bounds a usage count: beyond it a count is malformed,
// not tokens.
const plausibleTokens = 1 << 32

// addCapped reports d tokens, at most plausibleTokens, in calls otelenergy
// accepts (at most 2^24 each, the limit AddTokens documents): at most 256
// calls.
func addCapped(ex *exchange, d int64, input bool) {
	const step = 1 << 24
	d = min(d, plausibleTokens)
	for d > 0 {
		n := min(d, step)
		if input {
			ex.h.mon.AddInputTokens(ex.ctx, int(n))
		} else {
			ex.h.mon.AddTokens(ex.ctx, int(n))
		}
		d -= n
	}
}

// noteModel sets gen_ai.response.model from the first body that names it.
func (ex *exchange) noteModel(c *chunkInfo) {
	if ex.respModel != "" || len(c.model) == 0 {
		return
	}
	if c.modelEscaped {
		s, err := strconv.Unquote(`"` + string(c.model) + `"`)
		if err != nil {
			return
		}
		ex.respModel = s
	} else {
		ex.respModel = string(c.model)
	}
	if span := trace.SpanFromContext(ex.ctx); span.IsRecording() {
		span.SetAttributes(ResponseModelKey.String(ex.respModel))
	}
}

// finish ends the exchange when the wrapped handler returns or panics
// (ReverseProxy panics with http.ErrAbortHandler when a stream breaks).
func (ex *exchange) finish(returned bool) {
	defer func() {
		if recover() != nil {
			ex.unparsed(ReasonInternal)
		}
	}()
	if ex.status == 0 && returned {
		ex.status = http.StatusOK // the handler wrote nothing
	}
	failure := ""
	switch ex.mode {
	case modeSSE:
		ex.sse.flushHeld()
		if !ex.done {
			failure = ex.interrupted()
		}
	case modeJSON:
		if !returned {
			failure = ex.interrupted()
		} else if !ex.over {
			ex.readJSON()
		}
	default:
		if !returned && ex.status < 400 {
			failure = ex.interrupted()
		}
	}
	if ex.status >= 400 {
		failure = strconv.Itoa(ex.status)
	}
	if ex.hasUsage {
		if d := ex.inReported - ex.usageIn; d > 0 {
			ex.h.inst.overcount.Add(ex.ctx, d, ex.h.inst.inputOpt)
		}
		if d := ex.outReported - ex.usageOut; d > 0 {
			ex.h.inst.overcount.Add(ex.ctx, d, ex.h.inst.outputOpt)
		}
	}
	ex.record(failure)
	ex.markSpan(failure)
	if ex.h.cfg.trailers && returned && ex.rw.wroteHeader {
		// A flush before the handler returns keeps net/http's HTTP/2
		// server from stating a Content-Length for a small whole body:
		// with one, curl ends the response at its last byte and drops
		// the trailers that follow (a Go client still reads them).
		// ReverseProxy does the same for a backend's own trailers.
		http.NewResponseController(ex.rw.w).Flush()
		ex.setTrailers()
	}
}

// markSpan marks the request's span failed when its response did not
// reach the client whole: otelhttp saw the 200 go out and would call it a
// success. Other failures are the status's, which otelhttp records.
func (ex *exchange) markSpan(failure string) {
	switch {
	case failure == ReasonClientDisconnect, failure == ReasonTruncated, ex.status == StatusClientClosedRequest:
	default:
		return
	}
	if span := trace.SpanFromContext(ex.ctx); span.IsRecording() {
		span.SetAttributes(ErrorTypeKey.String(failure))
		span.SetStatus(codes.Error, "the response did not reach the client whole: "+failure)
	}
}

// Trailers the proxy ends each completion with, under [WithEnergyTrailers].
const (
	// TrailerEnergy carries the request's energy in whole millijoules.
	TrailerEnergy = "Energy-Millijoules"
	// TrailerApproximate says whether that figure is approximate.
	TrailerApproximate = "Energy-Approximate"
	// TrailerCo2e carries the request's emissions in mg CO2e with three
	// decimals (µg precision), such as "0.042": whole mg would read 0 for
	// most requests (under 4.5 J at 400 g/kWh). It is announced only when
	// the Monitor converts energy into emissions (otelenergy.WithCarbon),
	// and absent when no figure could be given; TrailerApproximate covers
	// it too.
	TrailerCo2e = "Energy-Co2e-Milligrams"
)

const trailerNames = TrailerEnergy + ", " + TrailerApproximate

// setTrailers sets the trailers from the request's figure as known now,
// once the response's body has passed and been flushed, or, under
// [WithFinalTrailers], from its final figure when the ledger settles it
// within the wait. The wait is bounded by the client's context too, so a
// client that goes away ends it.
func (ex *exchange) setTrailers() {
	req := otelenergy.RequestFromContext(ex.ctx)
	if req == nil {
		return
	}
	res := req.End()
	if w := ex.h.cfg.finalWait; w > 0 && res.HasEnergy {
		ctx, cancel := context.WithTimeout(ex.ctx, w)
		res = req.WaitFinal(ctx)
		cancel()
	}
	hdr := ex.rw.w.Header()
	if res.HasEnergy {
		hdr.Set(TrailerEnergy, strconv.FormatUint(res.EnergyMJ, 10))
		hdr.Set(TrailerApproximate, strconv.FormatBool(res.Approximate))
		if res.HasCo2e {
			hdr.Set(TrailerCo2e, formatMilligrams(res.Co2eMicrograms))
		}
	} else {
		hdr.Set(TrailerApproximate, "true")
	}
}

// formatMilligrams writes µg as mg with exactly three decimals, from the
// integer, so that no float rounding shows: 42 µg is "0.042".
func formatMilligrams(ug uint64) string {
	var b [24]byte
	out := strconv.AppendUint(b[:0], ug/1000, 10)
	f := ug % 1000
	out = append(out, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
	return string(out)
}

// interrupted names why a response ended early and counts it.
func (ex *exchange) interrupted() string {
	reason := ReasonTruncated
	if ex.ctx.Err() != nil {
		reason = ReasonClientDisconnect
	}
	ex.unparsed(reason)
	return reason
}

// readJSON reads a whole non-streaming response and reports its tokens:
// the usage when present, else the prompt estimate and one token per four
// bytes of generated text.
func (ex *exchange) readJSON() {
	c := &ex.chunk
	if err := scanChunk(ex.body, c); err != nil {
		ex.unparsed(ReasonMalformed)
		return
	}
	ex.noteModel(c)
	if c.hasUsage {
		ex.reconcile(c.promptTokens, c.completion)
		return
	}
	ex.sendInputEstimate()
	if n := estimateTokens(c.contentBytes); n > 0 {
		ex.h.mon.AddTokens(ex.ctx, n)
		ex.outReported += int64(n)
	}
}

// record records the GenAI server metrics in the request's context, so that
// exemplars link to its trace.
func (ex *exchange) record(failure string) {
	inst, c := ex.h.inst, ex.h.cfg
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, OperationNameKey.String(ex.op), attribute.String("gen_ai.provider.name", string(c.provider)))
	if ex.req.model != "" {
		attrs = append(attrs, RequestModelKey.String(ex.req.model))
	}
	if ex.respModel != "" {
		attrs = append(attrs, ResponseModelKey.String(ex.respModel))
	}
	n := len(attrs)
	if failure != "" {
		attrs = append(attrs, ErrorTypeKey.String(failure))
	}
	end := c.now()
	inst.Duration.Inst().Record(ex.ctx, end.Sub(ex.start).Seconds(), metric.WithAttributeSet(attribute.NewSet(attrs...)))
	if failure != "" || ex.firstToken.IsZero() {
		return
	}
	ok := metric.WithAttributeSet(attribute.NewSet(attrs[:n]...))
	inst.TTFT.Inst().Record(ex.ctx, ex.firstToken.Sub(ex.start).Seconds(), ok)
	if ex.outReported > 1 {
		inst.TPOT.Inst().Record(ex.ctx, ex.lastToken.Sub(ex.firstToken).Seconds()/float64(ex.outReported-1), ok)
	}
}

// responseWriter is the ResponseWriter the wrapped handler writes to.
type responseWriter struct {
	w           http.ResponseWriter
	ex          *exchange
	wroteHeader bool
}

var _ http.Flusher = (*responseWriter)(nil)

func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

func (rw *responseWriter) WriteHeader(code int) {
	if !rw.wroteHeader && code >= 200 {
		rw.wroteHeader = true
		rw.ex.begin(code)
	}
	rw.w.WriteHeader(code)
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.ex.write(p)
}

// Flush flushes the client's connection. In strip mode a partial event is
// still held; it follows when it ends.
func (rw *responseWriter) Flush() { http.NewResponseController(rw.w).Flush() }

// FlushError is Flush that reports the error, for http.ResponseController.
func (rw *responseWriter) FlushError() error { return http.NewResponseController(rw.w).Flush() }

// Unwrap returns the client's ResponseWriter, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }
