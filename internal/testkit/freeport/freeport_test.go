package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsAreFreeDistinctAndBelowTheEphemeralRange checks that the ports
// can be listened on, differ, and lie below the kernel's ephemeral range.
func TestPortsAreFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	s := candidates()
	ports := Ports(t, 20)
	seen := map[int]bool{}
	for _, port := range ports {
		if seen[port] {
			t.Fatalf("port %d handed out twice in %v", port, ports)
		}
		seen[port] = true
		if s.high > 0 && (port < s.low || port > s.high) {
			t.Errorf("port %d outside %d-%d", port, s.low, s.high)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on a handed-out port: %v", err)
		}
		ln.Close()
	}
}

// TestReserveSkipsTakenPorts checks that a port someone listens on is
// never handed out: with a one-port span that is taken, reserve fails.
func TestReserveSkipsTakenPorts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	if ports, err := reserve(1, span{low: taken, high: taken + 1}); err == nil && ports[0] == taken {
		t.Fatalf("reserve handed out the taken port %d", taken)
	}
	if ports, err := reserve(1, span{low: taken, high: taken}); err == nil {
		t.Fatalf("reserve of a taken one-port span: %v, want an error", ports)
	}
}
