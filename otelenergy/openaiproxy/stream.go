package openaiproxy

import (
	"bytes"
	"context"
	"errors"
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
	modeNone    = iota // not read: an error status, an unknown type, or given up
	modeSSE            // text/event-stream
	modeJSON           // a whole JSON body
	modeRebuild        // an upstream stream the proxy rebuilds a body from
	modeRefused        // a backend's refusal of an upstream stream, not passed on
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

	sse     *sseFramer // SSE and rebuild modes: the stream's events
	done    bool       // [DONE] or a finish_reason was seen
	sawDone bool       // [DONE] was seen

	body     []byte // JSON mode: the body so far
	over     bool   // JSON mode: the body passed the bound
	declared int64  // JSON mode: the backend's Content-Length, -1 when not stated
	read     bool   // JSON mode: the body was read as it passed, whole in one write

	// Upstream streaming ([WithUpstreamStreaming]).
	up        bool        // the request went upstream as a stream; the response is held
	upHdr     http.Header // the backend's header while the response is held
	upCtx     context.Context
	cancel    context.CancelFunc
	orig      []byte // the client's body, sent again if the backend refuses the stream
	rb        *rebuilder
	upFail    string // why the rebuilt body cannot be sent: a Reason, or reasonBackendError
	upErrMsg  string // the backend's error message, for reasonBackendError
	resendWhy string // why the client's request is sent again (modeRefused)
	answered  bool   // the proxy wrote the client's whole response itself
	res       reservation

	chunk          chunkInfo
	env            *envelope // a stream's chunks' envelope, read once
	respModel      string
	inReported     int64
	outReported    int64
	cachedReported int64
	usageIn        int64
	usageOut       int64
	hasUsage       bool
	inputSent      bool
	firstToken     time.Time
	lastToken      time.Time
	unparsedNoted  bool

	// Counting a chunk's tokens (see chunkTokens).
	stated    bool    // some chunk stated its tokens
	unstated  int64   // content choices whose tokens were estimated
	carry     float64 // the estimate's fraction not reported yet
	predicted int64   // llama.cpp's timings.predicted_n so far
}

// reasonBackendError is why a rebuilt body is not sent when the backend
// sent an error event in its stream.
const reasonBackendError = "backend_error"

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

// sseStopped implements sseConsumer: the response is no longer read. A
// body being rebuilt cannot be sent then.
func (ex *exchange) sseStopped(reason string) {
	ex.unparsed(reason)
	if ex.mode == modeRebuild {
		if ex.upFail == "" {
			ex.upFail = reason
		}
		return
	}
	ex.body = nil
	ex.mode = modeNone
}

// begin chooses how to read the response from its status and headers.
// It reports whether the response is held back from the client: a stream
// the proxy rebuilds a body from, or a refusal it answers by sending the
// client's request again.
func (ex *exchange) begin(status int) (held bool) {
	if ex.up {
		if ex.beginUpstream(status) {
			return true
		}
	}
	ex.status = status
	hdr := ex.rw.w.Header()
	ex.declared = -1
	if status >= 200 && status < 300 {
		if v := hdr.Get("Content-Length"); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				ex.declared = n
			}
		}
	}
	if ex.h.cfg.trailers {
		ex.announceTrailers(hdr)
	}
	if status < 200 || status >= 300 {
		return false
	}
	switch ct := hdr.Get("Content-Type"); {
	case isMediaType(ct, "text/event-stream"):
		ex.mode = modeSSE
	case isMediaType(ct, "application/json"):
		ex.mode = modeJSON
	default:
		return false
	}
	if ce := hdr.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		ex.mode = modeNone
		ex.unparsed(ReasonContentEncoding)
		return false
	}
	if ex.mode == modeSSE {
		ex.sse = &sseFramer{out: ex.rw.w, strip: ex.strip, c: ex}
	}
	if ex.mode == modeSSE && ex.strip {
		// Removing the usage chunk shortens the body, so the backend's
		// length would cut the client's stream short.
		hdr.Del("Content-Length")
	}
	return false
}

// announceTrailers announces the energy trailers in hdr. Trailers need a
// chunked HTTP/1.1 body: a stated length would end the response before
// them.
func (ex *exchange) announceTrailers(hdr http.Header) {
	hdr.Del("Content-Length")
	hdr.Add("Trailer", trailerNames)
	if reqcarbon.On(ex.ctx) {
		hdr.Add("Trailer", TrailerCo2e)
	}
}

// isMediaType reports whether the Content-Type v names the media type
// want (lower case), whatever its parameters.
func isMediaType(v, want string) bool {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return strings.EqualFold(strings.TrimSpace(v), want)
}

// beginUpstream chooses what to do with the backend's answer to a stream
// asked for a non-streaming client, and reports whether it is held back.
// An answer that is neither a stream nor a refusal (a whole JSON body from
// a backend that ignores "stream", an error status) reaches the client as
// the backend sent it.
func (ex *exchange) beginUpstream(status int) (held bool) {
	ex.status = status
	ce := ex.upHdr.Get("Content-Encoding")
	switch {
	case status >= 200 && status < 300 && isMediaType(ex.upHdr.Get("Content-Type"), "text/event-stream") &&
		(ce == "" || strings.EqualFold(ce, "identity")):
		ex.mode = modeRebuild
		ex.rb = newRebuilder(ex.h.cfg.maxResponse)
		ex.res.b = ex.h.cfg.budget
		ex.sse = &sseFramer{c: ex}
		return true
	case status >= 200 && status < 300 && isMediaType(ex.upHdr.Get("Content-Type"), "text/event-stream"):
		// A stream in a content coding, which the proxy did not ask for
		// and cannot read: the client, who asked for a whole body, is
		// sent what the backend answers its own request with.
		ex.mode, ex.resendWhy = modeRefused, "sent a stream in the content coding "+strconv.Quote(ce)
		return true
	case refusesStream(status):
		ex.mode, ex.resendWhy = modeRefused, "refused it with status "+strconv.Itoa(status)
		return true
	}
	ex.passUpstream()
	return false
}

// refusesStream reports whether a backend's status answers a stream it was
// asked for with a refusal worth sending the client's request again: a
// 4xx other than those that say nothing of the request's body (401, 403,
// 407), and than a timeout or a rate limit (408, 429), which another
// request would only make worse.
func refusesStream(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired,
		http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// passUpstream stops holding the response: the backend's header becomes
// the client's, and what follows passes as it would without upstream
// streaming.
func (ex *exchange) passUpstream() {
	hdr := ex.rw.w.Header()
	for k, v := range ex.upHdr {
		hdr[k] = v
	}
	ex.up = false
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
		ex.keepJSON(p[:n])
		return n, err
	case modeRebuild:
		ex.feed(p)
		return len(p), nil
	case modeRefused:
		return len(p), nil
	}
	return ex.rw.w.Write(p)
}

// keepJSON keeps a non-streaming body's bytes to read at its end, within
// the bound and the budget. A body that comes whole in one write, as its
// Content-Length states, is read at once, without a copy.
func (ex *exchange) keepJSON(p []byte) {
	switch {
	case ex.over || ex.read:
		return
	case ex.body == nil && ex.declared == int64(len(p)):
		ex.read = true
		ex.readJSON(p)
		return
	case len(ex.body)+len(p) > ex.h.cfg.maxBody || !ex.res.cover(int64(len(ex.body)+len(p))):
		ex.over, ex.body = true, nil
		ex.unparsed(ReasonTooLarge)
		return
	}
	ex.body = append(ex.body, p...)
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
// its tokens, feeds the body being rebuilt, and says what strip mode
// does with the event: drop the usage chunk the rewrite asked for, and
// cut from the other chunks a null or zero "usage" that a backend adds
// only because the rewrite asked for usage.
func (ex *exchange) sseEvent(data []byte) (drop bool, cut span) {
	if bytes.Equal(data, doneMarker) {
		ex.done, ex.sawDone = true, true
		return false, span{}
	}
	c := &ex.chunk
	if ex.env == nil {
		ex.env = &envelope{}
	}
	if err := scanChunkAfter(data, c, ex.env); err != nil {
		ex.giveUp(ReasonMalformed)
		return false, span{}
	}
	if c.hasError && ex.mode == modeRebuild {
		if ex.upFail == "" {
			ex.upFail, ex.upErrMsg = reasonBackendError, errorMessage(data)
		}
		return false, span{}
	}
	ex.noteModel(c)
	if c.finished {
		ex.done = true
	}
	ex.count(c)
	if ex.mode == modeRebuild && ex.upFail == "" {
		ex.rebuild(data)
	}
	if !ex.strip {
		return false, span{}
	}
	if c.hasUsage && c.hasChoices && c.choices == 0 {
		return true, span{}
	}
	if (c.usageNull || (c.hasUsage && c.usageZero)) && c.choices > 0 {
		return false, memberCut(data, c.usageAt)
	}
	return false, span{}
}

// rebuild merges one chunk into the body being rebuilt, within its bound
// and the budget.
func (ex *exchange) rebuild(data []byte) {
	switch err := ex.rb.add(data); {
	case errors.Is(err, errResponseTooLarge):
		ex.upFail = ReasonTooLarge
		ex.unparsed(ReasonTooLarge)
	case err != nil:
		ex.upFail = ReasonMalformed
		ex.unparsed(ReasonMalformed)
	case !ex.res.cover(int64(ex.rb.held)):
		ex.upFail = reasonBusy
	}
}

// reasonBusy is why a rebuilt body is not sent when the [Budget] had no
// room for it.
const reasonBusy = "busy"

// memberCut returns the bytes of member m of the object in b with the
// comma that separates it from a neighbour, so that cutting them leaves
// valid JSON.
func memberCut(b []byte, m memberSpan) span {
	if m.key < 0 {
		return span{}
	}
	j := m.key - 1
	for j >= 0 && isWS(b[j]) {
		j--
	}
	if j >= 0 && b[j] == ',' {
		return span{j, m.end}
	}
	k := skipWS(b, m.end)
	if k < len(b) && b[k] == ',' {
		return span{m.key, k + 1}
	}
	return span{m.key, m.end}
}

// errorMessage returns the message of an error event: error.message,
// error itself when it is a string, or a top-level message.
func errorMessage(b []byte) string {
	var msg string
	scanObject(b, skipWS(b, 0), 0, func(key []byte, i int) (int, error) {
		switch string(key) {
		case "error":
			if i < len(b) && b[i] == '"' {
				end, esc, err := scanString(b, i)
				if err == nil {
					msg = decodeString(b[i:end], esc)
				}
				return end, err
			}
			if i < len(b) && b[i] == '{' {
				return scanObject(b, i, 1, func(key []byte, i int) (int, error) {
					if string(key) == "message" && i < len(b) && b[i] == '"' {
						end, esc, err := scanString(b, i)
						if err == nil {
							msg = decodeString(b[i:end], esc)
						}
						return end, err
					}
					return skipValue(b, i, 2)
				})
			}
		case "message":
			if i < len(b) && b[i] == '"' && msg == "" {
				end, esc, err := scanString(b, i)
				if err == nil {
					msg = decodeString(b[i:end], esc)
				}
				return end, err
			}
		}
		return skipValue(b, i, 1)
	})
	const maxMessage = 1024
	if len(msg) > maxMessage {
		msg = strings.ToValidUTF8(msg[:maxMessage], "")
	}
	return msg
}

// count reports one chunk's tokens: its output tokens as
// [exchange.chunkTokens] counts them, the prompt estimate at the first
// chunk, and the usage it carries.
func (ex *exchange) count(c *chunkInfo) {
	if c.contentChoices > 0 || (c.hasChoices && c.choices > 0 && !ex.inputSent) {
		ex.sendInputEstimate()
	}
	n := ex.chunkTokens(c)
	// The clock is read at the first content chunk and at a chunk that
	// finishes a choice, not at every chunk: on a virtual machine a read
	// can cost as much as scanning the chunk (about 170 ns on the
	// development VM). The last token is the last finish's, or the
	// response's end (see record).
	if (n > 0 || c.contentChoices > 0) && ex.firstToken.IsZero() {
		ex.firstToken = ex.h.cfg.now()
	} else if c.finished && !ex.firstToken.IsZero() {
		ex.lastToken = ex.h.cfg.now()
	}
	if n > 0 {
		addCapped(ex, n, false)
		ex.outReported += n
	}
	if c.hasUsage {
		ex.reconcile(c)
	}
}

// chunkTokens returns the output tokens one chunk carries, from what the
// backend states, in this order: a usage in a chunk with content (vLLM's
// continuous usage stats; reconcile reports it, so 0 here), llama.cpp's
// timings.predicted_n (the tokens so far), a top-level "tokens" array,
// and each choice's logprobs entries or token ids. Where a choice states
// nothing, it counts the tokens per chunk learnt from the usage of the
// earlier streams that stated nothing (see [tokenRate]), one until there
// is one, with the fraction carried to the next chunk, and never past
// the request's max_tokens: the counts reported cannot be taken back.
func (ex *exchange) chunkTokens(c *chunkInfo) int64 {
	switch {
	case c.contentChoices == 0 && c.predicted < 0:
		return 0
	case c.hasUsage && c.completion > 0:
		ex.stated = true
		return 0
	case c.predicted >= 0:
		ex.stated = true
		d := c.predicted - ex.predicted
		ex.predicted = max(ex.predicted, c.predicted)
		return max(d, 0)
	case c.tokens >= 0 && c.choices <= 1:
		ex.stated = true
		return int64(c.tokens)
	}
	n := c.stated
	if n > 0 {
		ex.stated = true
	}
	if c.unstated > 0 {
		ex.unstated += int64(c.unstated)
		ex.carry += float64(c.unstated) * ex.h.rate.get()
		k := int64(ex.carry)
		ex.carry -= float64(k)
		if m := ex.req.maxTokens; m > 0 {
			k = min(k, max(m-ex.outReported-n, 0))
		}
		n += k
	}
	return n
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

// reconcile raises the reported counts to the usage the server states,
// cached prompt tokens included. Counts cannot be taken back, so an
// estimate above usage stays and is counted in
// otelenergy.proxy.tokens.overcount when the exchange ends.
func (ex *exchange) reconcile(c *chunkInfo) {
	in, out, cached := c.promptTokens, c.completion, c.cachedTokens
	ex.inputSent = true
	if in > plausibleTokens || out > plausibleTokens || cached > plausibleTokens {
		// Not a usage any server reports: keep what was counted.
		ex.unparsed(ReasonMalformed)
		return
	}
	if in == 0 && out == 0 {
		// A zeroed usage in every chunk (Ollama's text completions) is
		// no usage yet.
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
	if d := min(cached, in) - ex.cachedReported; d > 0 {
		// After the input tokens, of which they are a part.
		for d > 0 {
			n := min(d, 1<<24)
			ex.h.mon.AddCachedInputTokens(ex.ctx, int(n))
			d -= n
			ex.cachedReported += n
		}
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
	if ex.cancel != nil {
		defer ex.cancel()
	}
	defer ex.res.release()
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
		} else if !ex.over && !ex.read {
			ex.readJSON(ex.body)
		}
	case modeRebuild:
		failure = ex.answerRebuilt(returned)
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
		if failure == "" {
			ex.learnRate()
		}
	}
	ex.record(failure)
	ex.markSpan(failure)
	if ex.h.cfg.trailers && (returned || ex.answered) && ex.rw.wroteHeader && ex.status != StatusClientClosedRequest {
		// A flush before the handler returns keeps net/http's HTTP/2
		// server from stating a Content-Length for a small whole body:
		// with one, curl ends the response at its last byte and drops
		// the trailers that follow (a Go client still reads them).
		// ReverseProxy does the same for a backend's own trailers.
		http.NewResponseController(ex.rw.w).Flush()
		ex.setTrailers()
	}
}

// learnRate adds a stream that ended with its usage to the handler's
// tokens per chunk, when none of its chunks stated their tokens.
func (ex *exchange) learnRate() {
	if ex.hasUsage && !ex.stated && ex.unstated > 0 {
		ex.h.rate.observe(ex.usageOut, ex.unstated)
	}
}

// answerRebuilt answers the client of an upstream stream: the rebuilt
// body when the stream ended whole ([DONE], or every choice finished and
// the handler returned), an OpenAI-style error otherwise, never part of a
// body. It returns the failure to record, "" for none.
func (ex *exchange) answerRebuilt(returned bool) (failure string) {
	whole := ex.sawDone || (returned && ex.rb.finished())
	switch {
	case ex.upFail == "" && whole:
		body := ex.rb.body()
		if !ex.res.cover(int64(ex.rb.held + len(body))) {
			ex.answerError(http.StatusServiceUnavailable, "server_busy", "server_busy",
				"the proxy holds as many responses as its memory bound allows; retry")
			return ""
		}
		ex.answer(http.StatusOK, body)
		return ""
	case ex.ctx.Err() != nil:
		// The client left: nobody reads an answer.
		ex.status = StatusClientClosedRequest
		return ex.interrupted()
	case ex.upCtx != nil && errors.Is(ex.upCtx.Err(), context.DeadlineExceeded):
		ex.unparsed(ReasonTruncated)
		ex.answerError(http.StatusGatewayTimeout, "upstream_timeout", "gateway_timeout",
			"the backend did not finish the response in time")
	case ex.upFail == reasonBusy:
		ex.answerError(http.StatusServiceUnavailable, "server_busy", "server_busy",
			"the proxy holds as many responses as its memory bound allows; retry")
	case ex.upFail == reasonBackendError:
		msg := "the backend reported an error while generating the response"
		if ex.upErrMsg != "" {
			msg += ": " + ex.upErrMsg
		}
		ex.answerError(http.StatusBadGateway, "upstream_error", "bad_gateway", msg)
	case ex.upFail == ReasonTooLarge:
		ex.answerError(http.StatusBadGateway, "upstream_error", "response_too_large",
			"the response is above the proxy's bound of "+strconv.Itoa(ex.h.cfg.maxResponse)+" bytes")
	case ex.upFail != "":
		ex.answerError(http.StatusBadGateway, "upstream_error", "bad_gateway", "the backend sent a malformed stream")
	default:
		ex.interrupted()
		ex.answerError(http.StatusBadGateway, "upstream_error", "bad_gateway", "the backend closed the response before its end")
	}
	return ""
}

// answer writes the client's whole response, of the proxy's making: the
// backend's header (its Content-Type replaced), and body, with the framing
// and trailers of a non-streaming response.
func (ex *exchange) answer(status int, body []byte) {
	ex.passUpstream()
	hdr := ex.rw.w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Del("Content-Length")
	if ex.h.cfg.trailers {
		ex.announceTrailers(hdr)
	} else {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
	}
	ex.status, ex.answered, ex.rw.wroteHeader = status, true, true
	ex.rw.w.WriteHeader(status)
	ex.rw.w.Write(body)
}

// answerError answers with an OpenAI-style error of the proxy's making.
func (ex *exchange) answerError(status int, typ, code, msg string) {
	ex.upHdr = http.Header{}
	if status == http.StatusServiceUnavailable {
		ex.upHdr.Set("Retry-After", "1")
	}
	ex.answer(status, errorJSON(typ, code, msg))
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
func (ex *exchange) readJSON(body []byte) {
	c := &ex.chunk
	if err := scanChunk(body, c); err != nil {
		ex.unparsed(ReasonMalformed)
		return
	}
	ex.noteModel(c)
	if c.hasUsage && !c.usageZero {
		ex.reconcile(c)
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
	inst := ex.h.inst
	ok := inst.attrs(ex.op, ex.req.model, ex.respModel)
	end := ex.h.cfg.now()
	if ex.lastToken.IsZero() {
		ex.lastToken = end
	}
	dur := ok
	if failure != "" {
		dur = metric.WithAttributeSet(attribute.NewSet(append(inst.attrList(ex.op, ex.req.model, ex.respModel), ErrorTypeKey.String(failure))...))
	}
	inst.Duration.Inst().Record(ex.ctx, end.Sub(ex.start).Seconds(), dur)
	if failure != "" || ex.firstToken.IsZero() {
		return
	}
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
	held        bool // the response is held back from the client (see exchange.begin)
}

var _ http.Flusher = (*responseWriter)(nil)

// Header returns the client's header, or, while an upstream stream's
// answer is not chosen yet, the one held for it.
func (rw *responseWriter) Header() http.Header {
	if rw.ex.up {
		return rw.ex.upHdr
	}
	return rw.w.Header()
}

func (rw *responseWriter) WriteHeader(code int) {
	if rw.held {
		return
	}
	if !rw.wroteHeader && code >= 200 {
		rw.wroteHeader = true
		if rw.ex.begin(code) {
			rw.held, rw.wroteHeader = true, false
			return
		}
	}
	rw.w.WriteHeader(code)
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if !rw.wroteHeader && !rw.held {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.ex.write(p)
}

// Flush flushes the client's connection. In strip mode a partial event is
// still held; it follows when it ends. A response held back is not
// flushed: that would send the client a header before its answer is
// chosen.
func (rw *responseWriter) Flush() {
	if !rw.held {
		http.NewResponseController(rw.w).Flush()
	}
}

// FlushError is Flush that reports the error, for http.ResponseController.
func (rw *responseWriter) FlushError() error {
	if rw.held {
		return nil
	}
	return http.NewResponseController(rw.w).Flush()
}

// Unwrap returns the client's ResponseWriter, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }
