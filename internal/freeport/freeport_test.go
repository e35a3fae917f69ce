package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackGivesDistinctBindablePortsBelowTheEphemeralRange(t *testing.T) {
	ports, err := Loopback(20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 20 {
		t.Fatalf("got %d ports, want 20", len(ports))
	}
	low, seen := ephemeralLow(), map[int]bool{}
	for _, p := range ports {
		if p < floor || p >= low {
			t.Errorf("port %d outside [%d, %d)", p, floor, low)
		}
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d given but not bindable: %v", p, err)
			continue
		}
		l.Close()
	}
}
