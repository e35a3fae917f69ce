package procfs

import "bytes"

// Stat is what the agent and the CPU-time share read of one
// /proc/<pid>/stat line. Times are in clock ticks (USER_HZ).
type Stat struct {
	// PPid is the parent's pid, field 4.
	PPid uint32
	// UTime and STime are the process's own user and system time, fields
	// 14 and 15.
	UTime, STime uint64
	// CUTime and CSTime are the user and system time of its children
	// that it has waited for, fields 16 and 17: a reaped child's whole
	// time (its own children's included) moves here at once. The kernel
	// prints them signed; a negative one counts as 0.
	CUTime, CSTime uint64
	// StartTime is the process's start time since boot, field 22. With the
	// pid it identifies the process: a reused pid has a later one.
	StartTime uint64
}

// Ticks returns the process's own CPU time, utime + stime.
func (s Stat) Ticks() uint64 { return s.UTime + s.STime }

// TreeTicks returns the CPU time of the process and of the children it
// has reaped: utime + stime + cutime + cstime. Summed over the live
// members of a process tree, it does not drop when a member exits and is
// reaped by another member.
func (s Stat) TreeTicks() uint64 { return s.UTime + s.STime + s.CUTime + s.CSTime }

// ParseStat parses a /proc/<pid>/stat line up to its field 22. The
// second field, the command in parentheses, may itself hold spaces and
// parentheses (at most 64 bytes, escaped), so fields are counted from the
// last ')'. ok is false for a line that ends before field 22 or whose
// fields 4, 14 to 17 or 22 are not numbers.
func ParseStat(stat []byte) (s Stat, ok bool) {
	ok = fields(stat, 22, func(k int, f []byte) bool {
		var good bool
		switch k {
		case 4:
			var v uint64
			v, good = parseUint(f)
			good = good && v <= 1<<32-1
			s.PPid = uint32(v)
		case 14:
			s.UTime, good = parseUint(f)
		case 15:
			s.STime, good = parseUint(f)
		case 16:
			s.CUTime, good = parseNonNegative(f)
		case 17:
			s.CSTime, good = parseNonNegative(f)
		case 22:
			s.StartTime, good = parseUint(f)
		default:
			good = true
		}
		return good
	})
	return s, ok
}

// ParseParent returns field 4 of a /proc/<pid>/stat line, the parent's
// pid, counting fields from the last ')' as [ParseStat] does; the line
// may end after it.
func ParseParent(stat []byte) (ppid uint32, ok bool) {
	ok = fields(stat, 4, func(k int, f []byte) bool {
		if k != 4 {
			return true
		}
		v, good := parseUint(f)
		ppid = uint32(v)
		return good && v <= 1<<32-1
	})
	return ppid, ok
}

// ParseStartTime returns field 22 of a /proc/<pid>/stat line.
func ParseStartTime(stat []byte) (uint64, bool) {
	s, ok := ParseStat(stat)
	return s.StartTime, ok
}

// fields calls visit with each field k = 3 … last of a stat line, the
// ones after the command name's last ')', and reports whether the line
// held them all and visit accepted each.
func fields(stat []byte, last int, visit func(k int, f []byte) bool) bool {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	rest := stat[i+1:]
	for k := 3; k <= last; k++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		if j == 0 || !visit(k, rest[:j]) {
			return false
		}
		rest = rest[j:]
	}
	return true
}

// parseUint parses a decimal uint64 with no sign, allocating nothing.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		d := uint64(c) - '0'
		if d > 9 || v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseNonNegative parses a decimal int64 and returns it, or 0 when it is
// negative.
func parseNonNegative(b []byte) (uint64, bool) {
	if len(b) > 0 && b[0] == '-' {
		v, ok := parseUint(b[1:])
		return 0, ok && v <= 1<<63
	}
	v, ok := parseUint(b)
	return v, ok && v <= 1<<63-1
}
