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
//   - Streaming: each SSE event is read as it passes, and the output
//     tokens of each chunk whose choices carry generated content
//     (delta.content, reasoning_content, reasoning, refusal, tool_calls or
//     function_call in chat; text in text completions) are reported at
//     once with [otelenergy.Monitor.AddTokens], counted from what the
//     backend states: a usage in a chunk with content (vLLM's continuous
//     usage stats), llama.cpp's timings.predicted_n (the tokens so far) or
//     its "tokens" array, each choice's logprobs entries (content, refusal,
//     tokens) or vLLM's token_ids. Where a choice states nothing, it counts
//     the tokens per chunk learnt from the usage of the earlier streams
//     that stated nothing, 85% of its excess over one, one until a stream
//     has ended: vLLM and OpenAI send one token per chunk, Ollama about 1.3
//     when it holds partial UTF-8 back. The count never passes the
//     request's max_tokens (times n), since counts cannot be taken back.
//     At the first chunk the prompt's estimated input tokens are reported
//     with [otelenergy.Monitor.AddInputTokens], since prefill happened
//     before it.
//   - Non-streaming: see "# Upstream streaming"; a whole body, once it has
//     passed, reports usage.prompt_tokens and usage.completion_tokens.
//     Without usage, the prompt estimate and one token per four bytes of
//     generated text are.
//   - usage.prompt_tokens_details.cached_tokens (vLLM with
//     --enable-prompt-tokens-details, SGLang, OpenAI) is reported with
//     [otelenergy.Monitor.AddCachedInputTokens], after the input tokens.
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
// otelenergy.proxy.tokens.overcount ({token}, by gen_ai.token.type). A
// usage whose counts are all zero (Ollama's in every text completion chunk
// once include_usage is set) is no usage yet.
//
// # Usage rewrite
//
// By default ([WithIncludeUsage]) a streaming request without
// stream_options is sent upstream with "stream_options":{"include_usage":true}
// inserted after its opening brace, and without Accept-Encoding, so that the
// server states its usage in a final chunk whose choices are empty. That
// chunk is removed before it reaches the client, and so is a "usage" member
// that is null or all zeros in a chunk with choices, which some servers add
// to every chunk once include_usage is set (OpenAI's hosted API its
// "usage":null, Ollama its zeroed usage in text completions; vLLM adds
// none), with the comma that separated it: the client receives the bytes
// it would have received without the rewrite. To do so, each event's bytes
// are held until the event's terminating empty line: an SSE client acts on
// an event only there, so nothing it sees is delayed. A non-zero usage in a
// chunk with choices is left, since the backend may send it unasked. A
// client that sets stream_options itself is left alone.
//
// # Upstream streaming
//
// By default ([WithUpstreamStreaming]) a non-streaming request is sent
// upstream as a stream: "stream":true and
// "stream_options":{"include_usage":true} replace the request's members of
// those names or are inserted after its opening brace, every other byte
// kept, and Accept-Encoding is dropped. Its tokens are then reported as
// they are generated, as a streaming client's are, rather than all at its
// end, whose timing the ledger can only infer. The client receives the
// whole application/json body the backend would have returned, with the
// framing and trailers of a non-streaming response: nothing reaches it
// until the stream has ended, and then the status, the backend's header
// (its Content-Type and Content-Length replaced) and the body rebuilt from
// the chunks, by these rules:
//
//   - top level: "object" "chat.completion.chunk" becomes "chat.completion"
//     (a text completion's "text_completion" stays); "choices" are merged by
//     "index" and written in index order (n > 1); "usage" is the last
//     non-null one (prompt_tokens_details and completion_tokens_details
//     within it); OpenAI's "obfuscation" padding is dropped; every other
//     member, id, created, model, system_fingerprint and service_tier
//     included, is the value last sent, known or not.
//   - a choice: "delta" becomes "message"; "text" is concatenated;
//     "finish_reason" and vLLM's "stop_reason" are the last non-null value;
//     logprobs arrays are concatenated (chat's content and refusal; a text
//     completion's tokens, token_logprobs, top_logprobs and text_offset),
//     as are vLLM's token_ids.
//   - a message: content, reasoning_content, reasoning and refusal are
//     concatenated (null when no piece was a string; an empty content
//     beside tool calls is null, as non-streaming bodies have it); role is
//     the last non-null value, "assistant" when no chunk names it;
//     tool_calls are merged by index, each with
//     the last non-empty id, the last non-null type, the function's last
//     non-empty name and its arguments concatenated, and without the index
//     (OpenAI's, vLLM's and TGI's non-streaming calls have none); the
//     legacy function_call is merged as a function.
//   - members the stream never states are absent (vLLM's and SGLang's
//     non-streaming bodies add null ones, OpenAI's "annotations": []).
//
// The rebuilt body equals the backend's own for the same request on
// recorded pairs of vLLM, SGLang, TGI, llama.cpp server and the OpenAI API
// (testdata/README.md lists what their two forms disagree on), and
// Ollama's byte for byte for chat, but for id and created. openai-go's
// ChatCompletionAccumulator was not used: it keeps only its own schema
// (vLLM's stop_reason and reasoning_content and unknown members are lost),
// sums usage across chunks, has no text completions and no legacy
// function_call, and would bring openai-go into this module.
//
// A stream that does not end whole never becomes a truncated 200: an error
// event (a top-level "error", or vLLM's "object":"error") or a backend that
// closes the stream before [DONE] (or before every choice finished) gets an
// OpenAI-style error with 502, a stream past [WithUpstreamTimeout] 504, a
// body above [WithMaxResponseBytes] 502, and one the [Budget] has no room
// for 503 with Retry-After. A backend that refuses the stream with a 4xx
// (other than 401, 403, 407, 408 and 429), or sends it in a content coding,
// gets the client's request once more, unchanged, and that is logged once
// per handler; a backend that ignores "stream" and answers a whole body is
// read as any.
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
//     recorded and passed on, but for the abort of a stream whose answer
//     the proxy holds (upstream streaming), which it answers itself.
//   - The request body is read before it is forwarded (bounded by
//     [WithMaxBodyBytes]); completion requests are small next to the
//     time a completion takes.
//   - What it holds of responses, bodies it rebuilds and whole bodies it
//     reads, is bounded per response ([WithMaxResponseBytes],
//     [WithMaxBodyBytes]) and across requests by one [Budget]
//     ([WithBudget]), which a stage in front can share for request bodies.
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
// token from the first content chunk to the chunk that finishes a choice
// (else the response's end) over the count less one.
//
// # Stages
//
// A response passes three stages, one way: the SSE framer (sse.go) splits
// the bytes into lines and events, whatever the writes' sizes, holds
// each event in strip mode until it ends, and knows nothing of JSON; the
// exchange (stream.go) reads each event's JSON, reports tokens and decides
// which event to drop or cut; under upstream streaming the rebuilder
// (rebuild.go) merges each chunk into the body it answers with, and knows
// nothing of tokens. FuzzSSEFramer checks the framer alone against a
// simple reference, FuzzScanChunk the chunk scanner against encoding/json,
// FuzzRebuild the rebuilder against a plain reference of its rules.
// docs/architecture.md places the package in the whole.
//
// # Cost
//
// Each chunk costs a scan of its JSON (no allocation, no indirect call per
// member) and one atomic add; BenchmarkProxyStream compares it with a bare
// httputil.ReverseProxy, BenchmarkChunkPath measures the middleware's
// per-chunk cost without a network, BenchmarkSSEFramer the framer alone,
// and BenchmarkProxyUpstreamStream what upstream streaming adds to a
// non-streaming response.
//
// # Concurrency
//
// The handlers are safe for concurrent use. Each request's state is used by
// the goroutine serving it.
package openaiproxy
