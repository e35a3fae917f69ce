package openaiproxy

import (
	"math"
	"sync"
	"sync/atomic"
)

// tokenRate learns how many output tokens a chunk that states none
// carries, from the streams that ended with a usage and stated nothing in
// their chunks: the decayed sum of their usage over the decayed sum of
// their content chunks (each choice's chunk counts once). Ollama sends
// several tokens in about a third of its chunks (167 chunks for 256
// tokens), a pending UTF-8 sequence or a possible stop sequence held
// back; vLLM and OpenAI send one. Until a stream has ended it is 1: one
// token per chunk, the least a chunk with content carries. It is safe
// for concurrent use: get is one atomic load, for the chunk path.
type tokenRate struct {
	mu             sync.Mutex
	tokens, chunks float64
	bits           atomic.Uint64 // float64 bits of the rate; 0 before the first stream
}

const (
	// rateDecay weighs each earlier stream's sums once more per stream
	// that ended since: the rate follows a backend whose output changes
	// (another model loaded) within some tens of requests.
	rateDecay = 0.95
	// maxRate bounds the rate: no server batches more tokens than this
	// into every chunk.
	maxRate = 16
	// rateMargin is the share of the learnt tokens per chunk above one
	// that is counted: a stream that carries fewer per chunk than the
	// streams before (Ollama's vary by about 4 % around 1.3) must
	// rarely be counted above its usage, since counts cannot be taken
	// back. The usage adds what is left at the stream's end.
	rateMargin = 0.85
)

// get returns the tokens per chunk to count, at least 1.
func (r *tokenRate) get() float64 {
	if v := math.Float64frombits(r.bits.Load()); v > 1 {
		return 1 + rateMargin*(v-1)
	}
	return 1
}

// observe adds a stream of chunks content chunks whose usage stated
// tokens output tokens.
func (r *tokenRate) observe(tokens, chunks int64) {
	if tokens <= 0 || chunks <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens = r.tokens*rateDecay + float64(tokens)
	r.chunks = r.chunks*rateDecay + float64(chunks)
	r.bits.Store(math.Float64bits(min(max(r.tokens/r.chunks, 1), maxRate)))
}
