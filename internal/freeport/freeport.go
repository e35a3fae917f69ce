// Package freeport finds loopback TCP ports for tests that start servers
// by address.
//
// A port from the kernel's ephemeral range, which is what listening on
// port 0 gives, can be taken between the check and the server's bind by
// any outgoing connection on the machine, and the tests of many packages
// run at once. A port below that range can be taken only by a bind that
// names it, so the ports here are drawn from there.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ErrNone is returned when no free port was found.
var ErrNone = errors.New("freeport: no free loopback port below the ephemeral range")

// floor is the lowest port drawn: above the well-known and most
// registered services' ports.
const floor = 20000

// tries bounds the draws per port.
const tries = 100

// Loopback returns n distinct ports on 127.0.0.1 that were free when it
// checked them, each below the kernel's ephemeral range.
func Loopback(n int) ([]int, error) {
	low := ephemeralLow()
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		ok := false
		for range tries {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(floor+rand.IntN(low-floor)))
			if err != nil {
				continue // held: draw another
			}
			// Held until all n are drawn, so that they are distinct.
			held = append(held, l)
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
			ok = true
			break
		}
		if !ok {
			return nil, fmt.Errorf("%w after %d tries", ErrNone, tries)
		}
	}
	return ports, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range,
// 32768 (Linux's default) where it cannot be read.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > floor {
				low = v
			}
		}
	}
	return low
}
