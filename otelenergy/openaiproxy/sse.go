package openaiproxy

import (
	"bytes"
	"io"
)

// sseConsumer is what an [sseFramer] hands its events to.
type sseConsumer interface {
	// sseEvent reads one event's data (its data: lines joined by '\n')
	// and says what strip mode does with the event: drop it, or cut the
	// bytes data[cut.from:cut.to] out of it (when cut.to > cut.from; only
	// an event of one data: line is cut). It may stop the framer.
	sseEvent(data []byte) (drop bool, cut span)
	// sseStopped is called once when the framer stops, with the reason.
	sseStopped(reason string)
}

// span is a range of bytes, from inclusive, to exclusive.
type span struct{ from, to int }

// sseFramer splits a server-sent event stream, written in pieces of any
// size, into lines (ended by "\r\n", "\n" or "\r", a "\r\n" split across
// writes included) and events (ended by an empty line), and hands each
// event's data to its consumer. It knows nothing of JSON or tokens: that
// is the consumer's (the exchange's) job, so that the framer can be
// fuzzed and measured alone.
//
// Outside strip mode it only reads: the caller has already written the
// bytes to the client. In strip mode it holds each event's raw bytes
// until the event ends and then writes them to out, or drops them when the
// consumer says so: an SSE client acts on an event only at its end, so
// holding a partial event delays nothing it sees. In strip mode the
// consumer may also cut a range out of an event of one data: line.
//
// Memory is bounded: a line or an event's data above DefaultMaxEventBytes,
// or a held event above twice that, stops the framer (reason too_large),
// which then writes what it held and passes the rest through unread.
//
// An sseFramer is used by one goroutine.
type sseFramer struct {
	out   io.Writer
	strip bool
	c     sseConsumer

	stopped bool
	line    []byte // a line split across writes
	data    []byte // data of the event being read
	hasData bool
	held    []byte // strip mode: raw bytes of the event being read
	dataAt  int    // strip mode: where in held the event's first data value starts
	lines   int    // data: lines of the event being read
	skipLF  bool   // the previous write ended in '\r'
	crState int    // with skipLF: what the '\r' ended
}

// What a '\n' that follows a write ending in '\r' belongs to.
const (
	crInEvent   = iota // the event still being held
	crForwarded        // an event already forwarded
	crDropped          // an event that was dropped
)

var lf = []byte{'\n'}

// stop stops framing: in strip mode what is held is written out. The
// consumer is told once.
func (f *sseFramer) stop(reason string) {
	if f.stopped {
		return
	}
	f.stopped = true
	if f.strip && len(f.held) > 0 {
		f.out.Write(f.held)
	}
	f.held, f.line, f.data = nil, nil, nil
	f.c.sseStopped(reason)
}

// flushHeld writes what strip mode holds of an unfinished event: the
// stream ended without the blank line that would end it.
func (f *sseFramer) flushHeld() {
	if f.strip && len(f.held) > 0 {
		f.out.Write(f.held)
		f.held = nil
	}
}

// feed frames p. In strip mode it writes what is to be forwarded, and
// returns the client's write error.
func (f *sseFramer) feed(p []byte) (err error) {
	if f.skipLF && len(p) > 0 && !f.stopped {
		// The previous write ended in '\r'; a '\n' here belongs to it.
		// Once stopped, it passes through with the rest, in order.
		f.skipLF = false
		if p[0] == '\n' {
			if f.strip {
				switch f.crState {
				case crInEvent:
					f.held = append(f.held, '\n')
				case crForwarded:
					if _, err := f.out.Write(lf); err != nil {
						return err
					}
				}
			}
			p = p[1:]
		}
	}
	rest := p
	for !f.stopped && len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		lim := rest
		if i >= 0 {
			lim = rest[:i]
		}
		if j := bytes.IndexByte(lim, '\r'); j >= 0 {
			i = j
		}
		if i < 0 {
			if len(f.line)+len(rest) > DefaultMaxEventBytes {
				if f.strip {
					f.held = append(f.held, rest...)
				}
				f.stop(ReasonTooLarge)
				return nil
			}
			f.line = append(f.line, rest...)
			if f.strip {
				f.held = append(f.held, rest...)
			}
			return nil
		}
		end := i + 1
		if rest[i] == '\r' {
			if end < len(rest) {
				if rest[end] == '\n' {
					end++
				}
			} else {
				f.skipLF = true
			}
		}
		line := rest[:i]
		if len(f.line) > 0 {
			f.line = append(f.line, line...)
			line = f.line
		}
		if f.strip {
			f.held = append(f.held, rest[:end]...)
			if len(f.held) > 2*DefaultMaxEventBytes {
				// An event of many lines that never ends (comments,
				// event: or id: lines): stop holding it back.
				rest = rest[end:]
				f.stop(ReasonTooLarge)
				break
			}
		}
		rest = rest[end:]
		blank := len(line) == 0
		// Where the line starts in held, for a cut.
		lineAt := len(f.held) - (end - i) - len(line)
		drop, cut := f.processLine(line, lineAt)
		f.line = f.line[:0]
		f.crState = crInEvent
		if f.strip && blank && !f.stopped {
			// The event ended: forward it, or drop it.
			f.crState = crForwarded
			if drop {
				f.crState = crDropped
			} else {
				out := f.held
				if cut.to > cut.from && f.dataAt >= 0 {
					a, b := f.dataAt+cut.from, f.dataAt+cut.to
					out = append(f.held[:a], f.held[b:]...)
				}
				if _, err := f.out.Write(out); err != nil {
					return err
				}
			}
			f.held = f.held[:0]
		}
	}
	if f.stopped && len(rest) > 0 && f.strip {
		// Stopped mid-write: the rest passes as it is.
		_, err = f.out.Write(rest)
	}
	return err
}

// processLine handles one line, which starts at lineAt in held (strip
// mode). At an empty line it hands the event's data to the consumer and
// returns what to do with the event.
func (f *sseFramer) processLine(line []byte, lineAt int) (drop bool, cut span) {
	if len(line) == 0 {
		if !f.hasData {
			return false, span{}
		}
		f.hasData = false
		drop, cut = f.c.sseEvent(f.data)
		if f.lines != 1 {
			cut = span{}
		}
		f.data, f.lines = f.data[:0], 0
		return drop, cut
	}
	v, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return false, span{} // event:, id:, retry: and comments carry no data
	}
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	if f.hasData {
		f.data = append(f.data, '\n')
	}
	if len(f.data)+len(v) > DefaultMaxEventBytes {
		f.stop(ReasonTooLarge)
		return false, span{}
	}
	if f.lines == 0 {
		f.dataAt = lineAt + len(line) - len(v)
	}
	f.lines++
	f.data = append(f.data, v...)
	f.hasData = true
	return false, span{}
}
