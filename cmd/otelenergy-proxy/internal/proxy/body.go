package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"

	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// bodyStep is how much of a body of unknown length is reserved at a time.
const bodyStep = 64 << 10

// bodyLimit reads each request's body whole before anything is
// forwarded, so that a body above limit, declared or chunked, gets 413
// before any byte of it reaches the backend. The bytes held are reserved
// on budget (-max-buffered-bytes, which openaiproxy holds its responses
// within too) until the request ends: without it, concurrent bodies each
// under -max-request-bytes add up (four 30 MB bodies took the proxy to
// 411 MB). A request they do not fit gets 503 with Retry-After. The body
// passed on is a [heldBody], which openaiproxy parses without another
// copy.
func bodyLimit(limit int64, budget *openaiproxy.Budget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			openaiproxy.WriteError(w, r, &http.MaxBytesError{Limit: limit})
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// The buffer grows as bytes arrive, from bodyStep, doubling, to
		// one byte past what can be accepted: the declared length, or
		// the limit. A declared length is a claim, not bytes, so a client
		// that declares much and sends little holds little. The budget
		// holds the buffer's capacity up to the limit: the byte past it
		// only tells an oversized body, so equal limits still accept a
		// body of the full size, and an oversized body gets 413, not 503.
		ceil := limit + 1
		if r.ContentLength >= 0 {
			ceil = r.ContentLength + 1
		}
		var held int64
		defer func() { budget.Give(held) }()
		var b []byte
		for {
			if len(b) == cap(b) {
				size := min(max(int64(bodyStep), 2*int64(cap(b))), ceil)
				if need := min(size, limit) - held; need > 0 {
					if !budget.Take(need) {
						busy(w)
						return
					}
					held += need
				}
				b = append(make([]byte, 0, size), b...)
			}
			n, err := r.Body.Read(b[len(b):cap(b)])
			b = b[:len(b)+n]
			if int64(len(b)) > limit {
				openaiproxy.WriteError(w, r, &http.MaxBytesError{Limit: limit})
				return
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				// The client stopped sending; nothing was forwarded.
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		r.Body = &heldBody{Reader: bytes.NewReader(b), b: b}
		r.ContentLength = int64(len(b))
		r.TransferEncoding = nil
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		r.GetBody = func() (io.ReadCloser, error) { return &heldBody{Reader: bytes.NewReader(b), b: b}, nil }
		next.ServeHTTP(w, r)
	})
}

// busy answers 503 when the bodies held already fill the budget.
func busy(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, `{"error":{"message":"the proxy holds as many request bodies as its memory bound allows (-max-buffered-bytes); retry","type":"server_busy","param":null,"code":"server_busy"}}`+"\n")
}

// heldBody is a request body read whole. Bytes returns what is left to
// read, so that openaiproxy parses it in place.
type heldBody struct {
	*bytes.Reader
	b []byte
}

func (h *heldBody) Bytes() []byte { return h.b[len(h.b)-h.Len():] }
func (h *heldBody) Close() error  { return nil }
