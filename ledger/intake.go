package ledger

import (
	"sync/atomic"
	"unsafe"
)

// This file is the intake stage: where the request path leaves requests
// and their ends for the sampler, without a lock. Add pushes a request on
// one of inboxShards stacks (a compare-and-swap on one cache line), End
// counts its end on the same stack, and the sampler drains the stacks at
// every Observe, which adopts the requests into the ledger's active ones.
//
// # Protocol
//
// Each stack is a Treiber stack: push links the request to the head it
// loaded and publishes it by a compare-and-swap of the head, so the
// request's fields written before the push happen before the sampler's
// drain reads them; drain takes a whole stack by one swap of its head
// with nil. A stack's queued count is raised before its push and lowered
// after its pop, so it is never below the stack's length, and a push
// that would raise it past the stack's room is undone and refused. The
// room is what MaxActive leaves beside the active requests: while the
// sampler does not drain, what waits and what is active never exceed
// MaxActive, but for a push about to be undone.

// intake is the intake stage's state: the stacks, padded so that no other
// field shares their cache lines.
//
// push, spill, ended, endedSum and waiting are safe from any goroutine;
// drain and setRoom are the sampler's, from one goroutine at a time.
type intake struct {
	// inbox is where Add leaves requests for the sampler: one cache line
	// per shard, so that a request touches only its own shard's line.
	inbox [inboxShards]shard
	// roomGen counts the publications of the stacks' room; fullGen is
	// the publication at which an Add found every stack full, so that
	// later refusals under it try no other stack. Read-mostly: each is
	// written about once a sampler pass.
	roomGen, fullGen atomic.Uint64
	_                [48]byte
}

// shard is one stack of the inbox, with its own bound, padded to a cache
// line of its own.
type shard struct {
	head atomic.Pointer[Account]
	// queued counts the requests on this stack: Add counts one before it
	// pushes it, and uncounts it at once if it is refused; drain uncounts
	// one after it pops it. So it is never below the stack's length.
	queued atomic.Int64
	// room is this shard's part of the room the sampler last published:
	// MaxActive less the active requests, spread over the shards.
	room atomic.Int64
	// ended counts the tracked requests [Ledger.End] ended whose
	// requests hash to this stack, so that an estimate can tell how many
	// requests are still running without a lock (see Ledger.runningNow).
	ended atomic.Int64
	// endT sums their end times, modulo 2⁶⁴: with ended, it tells when
	// the ends since the last settle came, on average.
	endT atomic.Uint64
	_    [24]byte
}

// A shard fills exactly one 64-byte cache line: these fail to compile
// otherwise.
var (
	_ [64 - unsafe.Sizeof(shard{})]struct{}
	_ [unsafe.Sizeof(shard{}) - 64]struct{}
)

// spill pushes r, whose own stack (first, see shardOf) is full, on the
// next stack with room, and reports whether it did: false means every
// stack is full, and the caller refuses r. Add tries r's own stack first
// itself (push), so that a request whose stack has room costs one call.
func (in *intake) spill(r *Account, first int) bool {
	// Under overload every stack is full until the sampler publishes more
	// room: one Add found that out, and the others refuse at once.
	g := in.roomGen.Load()
	if in.fullGen.Load() == g {
		return false
	}
	for k := 1; k < inboxShards; k++ {
		if in.inbox[(first+k)%inboxShards].push(r) {
			return true
		}
	}
	in.fullGen.Store(g)
	return false
}

// ended counts the end of r, already stored in r, on r's stack.
func (in *intake) ended(r *Account) {
	s := &in.inbox[shardOf(r)]
	s.ended.Add(1)
	s.endT.Add(uint64(r.end.Load()))
}

// shardOf returns the inbox stack Add tries first for r.
func shardOf(r *Account) int { return int(uintptr(unsafe.Pointer(r))>>6) % inboxShards }

// endedSum returns the ends [Ledger.End] counted, summed over the inbox,
// and the sum of their times (modulo 2⁶⁴).
func (in *intake) endedSum() (int64, uint64) {
	var n int64
	var sum uint64
	for i := range in.inbox {
		n += in.inbox[i].ended.Load()
		sum += in.inbox[i].endT.Load()
	}
	return n, sum
}

// waiting returns the requests waiting in the inbox, and the ends counted
// with the sum of their times (modulo 2⁶⁴), as endedSum.
func (in *intake) waiting() (queued, ended int64, endT uint64) {
	for i := range in.inbox {
		s := &in.inbox[i]
		queued += s.queued.Load()
		ended += s.ended.Load()
		endT += s.endT.Load()
	}
	return queued, ended, endT
}

// setRoom spreads free, the room left under MaxActive, over the stacks,
// and starts a new generation of room.
func (in *intake) setRoom(free int) {
	for i := range in.inbox {
		room := free / inboxShards
		if i < free%inboxShards {
			room++
		}
		// Stored only when it changes: a store takes the line from the
		// cores whose requests use it, and a change in n moves the room
		// of one or two stacks only.
		if s := &in.inbox[i]; s.room.Load() != int64(room) {
			s.room.Store(int64(room))
		}
	}
	in.roomGen.Add(1)
}

// drain empties every inbox stack, handing each request to f.
func (in *intake) drain(f func(*Account)) {
	for i := range in.inbox {
		for r := in.inbox[i].head.Swap(nil); r != nil; {
			next := r.next
			r.next = nil
			in.inbox[i].queued.Add(-1)
			f(r)
			r = next
		}
	}
}

// push pushes r on s if s has room, and reports whether it did.
func (s *shard) push(r *Account) bool {
	if s.queued.Add(1) > s.room.Load() {
		s.queued.Add(-1)
		return false
	}
	for {
		h := s.head.Load()
		r.next = h
		if s.head.CompareAndSwap(h, r) {
			return true
		}
	}
}
