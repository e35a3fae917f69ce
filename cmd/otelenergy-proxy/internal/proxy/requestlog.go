package proxy

import (
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/otelenergy/otelenergy/otelenergy"
)

// requestLog logs one line per request once its response has passed,
// with the figure known then (see otelenergy.Request.End). It sits inside
// the energy middleware. A response cut short (ReverseProxy panics with
// http.ErrAbortHandler when the client goes away or the backend breaks
// mid-body) is logged too, at warning level with its cause, and the panic
// goes on up.
func requestLog(lg *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			rec := recover()
			level := slog.LevelInfo
			attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", sw.status), slog.Duration("duration", time.Since(start))}
			if rec != nil {
				level = slog.LevelWarn
				cause := "the backend's response broke off"
				if r.Context().Err() != nil {
					cause = "the client went away"
				}
				attrs = append(attrs, slog.String("error", cause))
			}
			if req := otelenergy.RequestFromContext(r.Context()); req != nil {
				res := req.End()
				attrs = append(attrs, slog.Uint64("output_tokens", res.OutputTokens), slog.Uint64("input_tokens", res.InputTokens))
				if res.HasEnergy {
					attrs = append(attrs, slog.Uint64("energy_mj", res.EnergyMJ), slog.Bool("approximate", res.Approximate))
				}
			}
			if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
				attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
			}
			lg.LogAttrs(r.Context(), level, "request", attrs...)
			if rec != nil {
				panic(rec)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter records the status; Unwrap keeps Flush and the other
// http.ResponseController methods working.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
