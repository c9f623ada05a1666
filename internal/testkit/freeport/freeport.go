// Package freeport hands tests loopback ports that nobody listens on, for
// servers a test starts, stops and starts again on the same address. For
// tests only.
//
// A port the kernel picked for "127.0.0.1:0" lies in the ephemeral range,
// from which the kernel also picks the local port of every outgoing
// connection on the machine: once the test's reserving listener is closed,
// any dial (a peer redialling the stopped server, another test package's
// client) may take that port and make the next listen fail with "address
// already in use". The ports handed out here lie below the ephemeral range,
// where only an explicit bind can take them. A port is handed out once a
// process, so that a server a test stopped keeps its port for its restart
// against the process's other tests.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port handed out, above the ports services usually
// claim.
const lowest = 10000

// Ports returns n distinct free loopback ports.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	ports, err := reserve(n, candidates())
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	return ports
}

// Addr returns one free loopback address, "127.0.0.1:port".
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Ports(t, 1)[0]))
}

// handedOut holds the ports this process was given.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// span is a range of ports, both ends included.
type span struct{ low, high int }

// candidates returns the ports below the ephemeral range, or an empty span
// when that range cannot be read or leaves no room below it.
func candidates() span {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return span{}
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return span{}
	}
	ephemeralLow, err := strconv.Atoi(fields[0])
	if err != nil || ephemeralLow-1 < lowest+1000 {
		return span{}
	}
	return span{low: lowest, high: ephemeralLow - 1}
}

// reserve listens on n distinct ports drawn at random from s (or picked by
// the kernel when s is empty) and never handed out before in this process,
// then releases them all.
func reserve(n int, s span) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts == 100*n {
			return nil, fmt.Errorf("no free port among %d tries in %d-%d", attempts, s.low, s.high)
		}
		port := 0
		if s.high > 0 {
			port = s.low + rand.IntN(s.high-s.low+1)
			if handedOut.ports[port] {
				continue
			}
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				return nil, fmt.Errorf("reserve a port: %w", err)
			}
			continue // taken: draw another
		}
		listeners = append(listeners, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, port := range ports {
		handedOut.ports[port] = true
	}
	return ports, nil
}
