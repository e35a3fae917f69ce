package openaiproxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/internal/reqmodel"
)

// New returns a reverse proxy to target that reports each completion's
// tokens on mon as they pass, as [NewMiddleware] describes. It is built to
// sit inside the energy middleware, itself inside otelhttp:
//
//	otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(openaiproxy.New(target, mon)), "gateway")
//
// Requests go to target's scheme and host, with target's path prefixed to
// theirs and X-Forwarded-* headers set, as httputil.ProxyRequest.SetURL and
// SetXForwarded do. A backend that cannot be reached gets the error
// handler's answer ([WithErrorHandler], by default [WriteError]: a 502 or
// 504 with an OpenAI-style JSON body, and a line on [WithErrorLog]'s
// logger). New panics if target is nil.
func New(target *url.URL, mon *otelenergy.Monitor, opts ...Option) http.Handler {
	return NewMiddleware(mon, opts...)(newReverseProxy(target, newConfig(opts)))
}

// newReverseProxy is New's upstream half.
func newReverseProxy(target *url.URL, c config) *httputil.ReverseProxy {
	if target == nil {
		panic("openaiproxy: New with a nil target")
	}
	eh := c.errorHandler
	if c.defaultErrors {
		eh = func(w http.ResponseWriter, r *http.Request, err error) {
			c.logError(r, err)
			WriteError(w, r, err)
		}
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport:    c.transport,
		ErrorHandler: eh,
		ErrorLog:     c.errorLog,
	}
}

// NewMiddleware returns middleware that reads the OpenAI-compatible
// completions passing through the wrapped handler, usually a reverse proxy,
// and reports their tokens on mon against the request in each request's
// context. The wrapped handler needs no change.
//
// It reads POST /v1/chat/completions and POST /v1/completions; every other
// request reaches the wrapped handler untouched. The ResponseWriter it
// passes on supports http.Flusher and http.ResponseController (through
// Unwrap), so streaming keeps working. A nil mon reports no tokens but keeps
// the metrics and span attributes.
func NewMiddleware(mon *otelenergy.Monitor, opts ...Option) func(http.Handler) http.Handler {
	c := newConfig(opts)
	inst := newInstruments(c.meterProvider, c.provider)
	// One rate and one note of refusals per handler built: they describe
	// the backend behind it.
	rate, refused := &tokenRate{}, &atomic.Bool{}
	return func(next http.Handler) http.Handler {
		return &handler{next: next, mon: mon, cfg: c, inst: inst, rate: rate, refusedLogged: refused}
	}
}

type handler struct {
	next          http.Handler
	mon           *otelenergy.Monitor
	cfg           config
	inst          *instruments
	rate          *tokenRate
	refusedLogged *atomic.Bool
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var op string
	switch {
	case r.Method != http.MethodPost:
	case r.URL.Path == pathChat:
		op = "chat"
	case r.URL.Path == pathCompletion:
		op = "text_completion"
	}
	if op == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	ex := &exchange{h: h, ctx: r.Context(), op: op, start: h.cfg.now(), res: reservation{b: h.cfg.budget}}
	out := ex.readRequest(r)
	// The request's energy is recorded with the model it names.
	reqmodel.From(ex.ctx).Set(ex.req.model)
	span := trace.SpanFromContext(ex.ctx)
	if span.IsRecording() {
		if ex.req.model != "" {
			span.SetAttributes(OperationNameKey.String(op), RequestModelKey.String(ex.req.model))
		} else {
			span.SetAttributes(OperationNameKey.String(op))
		}
	}
	ex.rw = responseWriter{w: w, ex: ex}
	returned := false
	defer func() { ex.finish(returned) }()
	returned = ex.serve(out)
	if ex.mode == modeRefused && ex.ctx.Err() == nil {
		// The refusal is not passed on, so a refusal whose body broke
		// off (ReverseProxy's abort, which serve took) is resent all
		// the same: the client has received nothing yet.
		returned = ex.serve(ex.resend(r))
	}
}

// serve passes r to the wrapped handler and reports whether it returned.
// While an upstream stream's answer is held back, the abort with which
// ReverseProxy ends a stream that breaks (http.ErrAbortHandler) is the
// exchange's to answer, since the client has received nothing yet; any
// other panic passes on.
func (ex *exchange) serve(r *http.Request) (returned bool) {
	if ex.up {
		defer func() {
			if v := recover(); v != nil && (v != http.ErrAbortHandler || !ex.rw.held) {
				panic(v)
			}
		}()
	}
	ex.h.next.ServeHTTP(&ex.rw, r)
	return true
}

// resend returns the client's request as it came, to send again after
// the backend refused the stream it was sent as, and makes the exchange
// a plain one. It logs the refusal once per handler.
func (ex *exchange) resend(in *http.Request) *http.Request {
	if !ex.h.refusedLogged.Swap(true) {
		ex.h.cfg.errorLog.Printf("openaiproxy: %s %s: a non-streaming request was sent upstream as a stream and the backend %s; "+
			"such requests are sent again as the client sent them (logged once; WithUpstreamStreaming(false), or -upstream-stream=false, stops asking)",
			in.Method, in.URL.Path, ex.resendWhy)
	}
	ex.up, ex.mode, ex.status, ex.upHdr = false, modeNone, 0, nil
	ex.rw.held, ex.rw.wroteHeader = false, false
	if ex.cancel != nil {
		ex.cancel()
		ex.cancel, ex.upCtx = nil, nil
	}
	r := *in
	if r.ContentLength != int64(len(ex.orig)) {
		r.Header = in.Header.Clone()
	}
	setBody(&r, ex.orig)
	return &r
}

// readRequest reads what the proxy needs from in's body and returns the
// request to forward: in itself when nothing of it changes (a body a stage
// in front holds, [heldBody], is read in place), else a copy with the
// body, and the header when it changes, of its own. A body it cannot read
// is forwarded as it came.
func (ex *exchange) readRequest(in *http.Request) *http.Request {
	if ce := in.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		ex.unparsed(ReasonRequestEncoding)
		return in
	}
	r := in
	own := func() {
		if r == in {
			c := *in
			r = &c
		}
	}
	cloned := false
	ownHeader := func() {
		own()
		if !cloned {
			r.Header, cloned = in.Header.Clone(), true
		}
	}
	if _, held := in.Body.(heldBody); !held && in.Body != nil && in.Body != http.NoBody {
		own() // its body is read here and replaced
	}
	body, held, ok, err := readBody(r, ex.h.cfg.maxBody)
	if err != nil {
		return r // the body is broken; the upstream request reports it
	}
	if !ok {
		ex.unparsed(ReasonRequestTooLarge)
		return r
	}
	info, ok := parseRequest(body)
	if !ok {
		ex.unparsed(ReasonMalformedRequest)
	} else {
		ex.req = info
	}
	// A rewrite copies the body: the copy is held within the Budget, as
	// the body a stage in front holds is, and a body it has no room for
	// goes upstream as it came (its tokens are then read as without the
	// rewrite).
	rewrite := func() bool { return ex.res.hold(int64(len(body) + rewriteGrowth)) }
	switch {
	case ok && info.stream && !info.hasStreamOpt && ex.h.cfg.includeUsage && rewrite():
		body = addIncludeUsage(body)
		ex.strip = true
		// The usage chunk can be removed only from a body the proxy can
		// read, so the rewritten request asks for no content coding.
		ownHeader()
		r.Header.Del("Accept-Encoding")
	case ok && !info.stream && ex.h.cfg.upstream && rewrite():
		ex.up, ex.orig, ex.upHdr = true, body, http.Header{}
		body = streamingBody(body, &info)
		ownHeader()
		r.Header.Del("Accept-Encoding")
		if d := ex.h.cfg.upTimeout; d > 0 {
			ex.upCtx, ex.cancel = context.WithTimeout(ex.ctx, d)
			r = r.WithContext(ex.upCtx)
		}
	case held:
		return r
	}
	if r.ContentLength != int64(len(body)) {
		ownHeader()
	}
	own()
	setBody(r, body)
	return r
}
