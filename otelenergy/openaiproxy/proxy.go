package openaiproxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

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
	inst := newInstruments(c.meterProvider)
	return func(next http.Handler) http.Handler {
		return &handler{next: next, mon: mon, cfg: c, inst: inst}
	}
}

type handler struct {
	next http.Handler
	mon  *otelenergy.Monitor
	cfg  config
	inst *instruments
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
	ex := &exchange{h: h, ctx: r.Context(), op: op, start: h.cfg.now()}
	// The body and headers may be rewritten; the caller's request is not.
	rr := *r
	rr.Header = r.Header.Clone()
	r = &rr
	ex.readRequest(r)
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
	h.next.ServeHTTP(&ex.rw, r)
	returned = true
}

// readRequest reads what the proxy needs from r's body and, when the usage
// rewrite applies, rewrites it. A body it cannot read is left as it was.
func (ex *exchange) readRequest(r *http.Request) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		ex.unparsed(ReasonRequestEncoding)
		return
	}
	body, ok, err := readBody(r, ex.h.cfg.maxBody)
	if err != nil {
		return // the body is broken; the upstream request reports it
	}
	if !ok {
		ex.unparsed(ReasonRequestTooLarge)
		return
	}
	info, ok := parseRequest(body)
	if !ok {
		ex.unparsed(ReasonMalformedRequest)
		setBody(r, body)
		return
	}
	ex.req = info
	if info.stream && !info.hasStreamOpt && ex.h.cfg.includeUsage {
		body = addIncludeUsage(body)
		ex.strip = true
		// The usage chunk can be removed only from a body the proxy can
		// read, so the rewritten request asks for no content coding.
		r.Header.Del("Accept-Encoding")
	}
	setBody(r, body)
}
