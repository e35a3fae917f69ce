// Package openaiproxy puts per-request GPU energy on the requests a Go
// gateway forwards to an OpenAI-compatible server on the same host (vLLM,
// TGI, llama.cpp server, Ollama), with no change to the server or the
// gateway's handlers.
//
// [New] is a reverse proxy and [NewMiddleware] wraps one (or any handler
// that serves completions). Either reads the completions as they pass and
// reports their tokens on an [otelenergy.Monitor] against the request in the
// request's context, which the energy middleware created:
//
//	mon, _ := otelenergy.NewMonitor(src)
//	mon.Start()
//	h := otelhttp.NewHandler(otelenergy.NewMiddleware(mon)(openaiproxy.New(target, mon)), "gateway")
//
// The energy middleware then sets energy.millijoules and the token counts on
// the otelhttp span, as it does for any handler.
//
// # What is read
//
// POST /v1/chat/completions and POST /v1/completions are read; every other
// request passes to the wrapped handler untouched. A response is read when
// its status is 2xx and its Content-Type is text/event-stream (a stream) or
// application/json (a whole body), without a Content-Encoding.
//
//   - Streaming: each SSE event is read as it passes. Each chunk whose
//     choices carry generated content (delta.content, reasoning_content,
//     reasoning or tool_calls in chat; text in text completions) counts one
//     output token per choice, reported at once with [otelenergy.Monitor.AddTokens].
//     One token per chunk is how vLLM and OpenAI stream; a server that
//     sends several tokens per chunk is under-counted until its usage
//     arrives. At the first chunk the prompt's estimated input tokens are
//     reported with [otelenergy.Monitor.AddInputTokens], since prefill
//     happened before it.
//   - Non-streaming: once the body has passed, usage.prompt_tokens and
//     usage.completion_tokens are reported. Without usage, the prompt
//     estimate and one token per four bytes of generated text are.
//
// The prompt estimate is one token per four bytes of message text (or of
// the prompt), rounded up; a prompt of token ids counts exactly. It leaves
// out the chat template's own tokens, so it usually falls short.
//
// # Reconciling with usage
//
// When a chunk or body carries usage, the reported counts are raised to it:
// the difference is reported then. Counts cannot be lowered, so when an
// estimate overshot the usage, the request keeps the higher count (and the
// energy the ledger split by it), and the excess is added to
// otelenergy.proxy.tokens.overcount ({token}, by gen_ai.token.type).
//
// # Usage rewrite
//
// By default ([WithIncludeUsage]) a streaming request without
// stream_options is sent upstream with "stream_options":{"include_usage":true}
// inserted after its opening brace, and without Accept-Encoding, so that the
// server states its usage in a final chunk whose choices are empty. That
// chunk is removed before it reaches the client, who receives the bytes it
// would have received without the rewrite. To remove it, each event's bytes
// are held until the event's terminating empty line: an SSE client acts on
// an event only there, so nothing it sees is delayed. A server that, once
// include_usage is set, also adds "usage":null to every other chunk
// (OpenAI's hosted API does; vLLM does not) would show that field to the
// client; turn the rewrite off for such a server. A client that sets
// stream_options itself is left alone.
//
// # Guarantees
//
//   - Outside the usage rewrite, every byte the client receives is the
//     byte the wrapped handler wrote, written through before it is read;
//     Flush and http.ResponseController pass through.
//   - A body it cannot read passes through untouched, and the request keeps
//     what was counted so far: a Content-Encoding, malformed JSON, a body
//     or event above the bound ([WithMaxBodyBytes], [DefaultMaxEventBytes]),
//     a stream that ends before [DONE] or a finish_reason (the backend died,
//     or the client left). Each is counted once in otelenergy.proxy.unparsed
//     ({response}) with a reason attribute (see [ReasonTruncated] and the
//     other Reason constants).
//   - It never panics on input. Its parser recovers its own panics and gives
//     up (reason internal); a panic of the wrapped handler, such as
//     http.ErrAbortHandler from ReverseProxy, is not recovered: it is
//     recorded and passed on.
//   - The request body is read before it is forwarded (bounded by
//     [WithMaxBodyBytes]); completion requests are small next to the
//     time a completion takes.
//
// # Spans and metrics
//
// On the span in the request's context it sets gen_ai.operation.name (chat
// or text_completion), gen_ai.request.model and gen_ai.response.model. The
// token and energy attributes are the energy middleware's.
//
// It records the GenAI server metrics of the semantic conventions (semconv
// v1.41.0 genaiconv), with their advised bucket boundaries, in the request's
// context so that exemplars link to traces: gen_ai.server.request.duration,
// gen_ai.server.time_to_first_token and gen_ai.server.time_per_output_token
// (histograms, s), with gen_ai.operation.name, gen_ai.provider.name
// ([WithProviderName]), gen_ai.request.model and gen_ai.response.model
// where known. A failed request's duration carries error.type: the HTTP
// status code for a status of 400 or more (499 for a client that left
// before the backend answered), truncated, or client_disconnect; a
// truncated or disconnected response also marks the span failed;
// the other two are recorded for successful streams only, time per output
// token from the first to the last token over the count less one.
//
// # Stages
//
// A response passes two stages, one way: the SSE framer (sse.go) splits
// the bytes into lines and events, whatever the writes' sizes, holds
// each event in strip mode until it ends, and knows nothing of JSON; the
// exchange (stream.go) reads each event's JSON, reports tokens and decides
// which event to drop. FuzzSSEFramer checks the framer alone against a
// simple reference. docs/architecture.md places the package in the whole.
//
// # Cost
//
// Each chunk costs a scan of its JSON (no allocation) and one atomic add;
// BenchmarkProxyStream compares it with a bare httputil.ReverseProxy, and
// BenchmarkSSEFramer measures the framer alone.
//
// # Concurrency
//
// The handlers are safe for concurrent use. Each request's state is used by
// the goroutine serving it.
package openaiproxy
