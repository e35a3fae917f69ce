// Package ring holds the sampled (time, cumulative energy, cumulative tokens)
// series that every energy figure in otelenergy is derived from, and the
// arithmetic that turns two points of it into joules per token or a
// request's share of energy.
//
// # Concurrency
//
// A [Ring] has exactly one writer, the sampler, which calls [Ring.Push], and
// any number of readers, which never take a lock. A reader never observes a
// torn point: every value it returns was written by one Push, whole.
//
// # The protocol
//
// The ring is a seqlock whose sequence number is the write cursor. Each slot
// stores its point's three fields in three atomic words, kept in three
// separate arrays so that a binary search touches only the time array. The
// cursor, written, counts completed pushes. Push n stores the fields of
// logical point n into slot n mod capacity and only then stores written =
// n+1. Slot n mod capacity last held logical point n-capacity, so a point j
// can be overwritten only by push j+capacity, which starts after written
// reached j+capacity.
//
// A reader loads written (hi), reads the slots it needs, and loads written
// again (hi2). Every logical index j it read is valid if j+capacity > hi2.
// Go's atomic operations are sequentially consistent, so if any store of a
// later push to j's slot preceded one of the reader's loads, the store of
// written = j+capacity preceded it too, and hi2 ≥ j+capacity. Conversely, if
// hi2 < j+capacity, every store to the slot came after every load the reader
// made, and since j < hi, all of point j's stores came before them. A failed
// validation means the writer lapped the reader; the reader retries, stepping
// a little further from the oldest end each time, a bounded number of times
// and then reports no point. At a sane sampling cadence this never happens.
//
// Readers consider the live points [hi-capacity+1, hi): one slot is always
// left as slack for the push that may be in progress.
//
// # Times
//
// Point times are nanoseconds on one monotonic clock chosen by the writer.
// Push rejects a time earlier than the previous point's, which keeps the
// binary search valid.
package ring
