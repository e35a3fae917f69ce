package openaiproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
)

// StatusClientClosedRequest is the status recorded for a request whose
// client went away before the backend answered: 499, as nginx and Caddy
// name it, so that aborts are told apart from the backend's failures
// (502, 504). No client reads it.
const StatusClientClosedRequest = 499

// WriteError answers a request the backend could not serve with an
// OpenAI-style error body, {"error":{"message":...,"type":...,"param":null,"code":...}},
// which OpenAI clients parse into their error types. It is [New]'s default
// error handler ([WithErrorHandler]):
//
//   - 499 (type client_closed_request) when the client went away first
//     (the request's context was canceled);
//   - 504 Gateway Timeout (type upstream_timeout) when the backend did not
//     answer in time: a deadline passed (the request's own included, such
//     as [WithUpstreamTimeout]'s) or the connection timed out;
//   - 413 Request Entity Too Large (type invalid_request_error) when the
//     request body passed an http.MaxBytesReader's bound;
//   - 502 Bad Gateway (type upstream_error) otherwise: the backend refused
//     the connection, reset it, or sent a malformed response.
//
// The message names the class of failure only: err's text, which can
// carry the backend's address, is for the log ([WithErrorLog]), not the
// client.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, code := http.StatusBadGateway, "upstream_error", "bad_gateway"
	msg := "the backend could not be reached or sent a malformed response"
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		status, typ, code = http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"
		msg = "the request body is above " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
	case errors.Is(r.Context().Err(), context.Canceled):
		status, typ, code = StatusClientClosedRequest, "client_closed_request", "client_closed_request"
		msg = "the client closed the request"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(r.Context().Err(), context.DeadlineExceeded):
		status, typ, code = http.StatusGatewayTimeout, "upstream_timeout", "gateway_timeout"
		msg = "the backend did not answer in time"
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(errorJSON(typ, code, msg))
}

// errorJSON returns an OpenAI-style error body, ended by a newline.
func errorJSON(typ, code, msg string) []byte {
	body, _ := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: typ, Code: code}})
	return append(body, '\n')
}

// logError is the default error handler's log line: what the client's
// body leaves out. A client that went away is not the backend's failure
// and is not logged.
func (c *config) logError(r *http.Request, err error) {
	if errors.Is(r.Context().Err(), context.Canceled) {
		return
	}
	c.errorLog.Printf("openaiproxy: %s %s: the backend failed: %v", r.Method, r.URL.Path, err)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}
