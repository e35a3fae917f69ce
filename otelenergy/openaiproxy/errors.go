package openaiproxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
)

// WriteError answers a request the backend could not serve with an
// OpenAI-style error body, {"error":{"message":...,"type":...,"param":null,"code":...}},
// which OpenAI clients parse into their error types. It is [New]'s default
// error handler ([WithErrorHandler]):
//
//   - 504 Gateway Timeout (type upstream_timeout) when the backend did not
//     answer in time: a deadline passed or the connection timed out;
//   - 413 Request Entity Too Large (type invalid_request_error) when the
//     request body passed an http.MaxBytesReader's bound;
//   - 502 Bad Gateway (type upstream_error) otherwise: the backend refused
//     the connection, reset it, or sent a malformed response.
//
// A client that went away gets the 502 too: no one reads it, but the
// request's metrics record it as failed.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, code := http.StatusBadGateway, "upstream_error", "bad_gateway"
	msg := "the backend did not answer: " + err.Error()
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		status, typ, code = http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large"
		msg = "the request body is above " + strconv.FormatInt(mbe.Limit, 10) + " bytes"
	case r.Context().Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		status, typ, code = http.StatusGatewayTimeout, "upstream_timeout", "gateway_timeout"
		msg = "the backend timed out: " + err.Error()
	}
	body, _ := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: typ, Code: code}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
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
