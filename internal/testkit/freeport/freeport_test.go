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

// TestReserveHandsAPortOutOnce checks that a port released by a test (a
// stopped server's) is not handed to another test of the process: over a
// span of two free ports, two reserves get both, and a third fails.
func TestReserveHandsAPortOutOnce(t *testing.T) {
	low := twoFreePorts(t)
	s := span{low: low, high: low + 1}
	first, err := reserve(1, s)
	if err != nil {
		t.Fatalf("first reserve: %v", err)
	}
	second, err := reserve(1, s)
	if err != nil {
		t.Fatalf("second reserve: %v", err)
	}
	if first[0] == second[0] {
		t.Fatalf("port %d handed out twice", first[0])
	}
	if third, err := reserve(1, s); err == nil {
		t.Fatalf("third reserve of a two-port span: %v, want an error", third)
	}
}

// twoFreePorts returns a port p such that p and p+1 are free, from below
// the ephemeral range, not yet handed out.
func twoFreePorts(t *testing.T) int {
	t.Helper()
	for range 100 {
		ports := Ports(t, 1)
		handedOut.Lock()
		ok := !handedOut.ports[ports[0]+1] && free(ports[0]+1)
		if ok {
			delete(handedOut.ports, ports[0])
		}
		handedOut.Unlock()
		if ok {
			return ports[0]
		}
	}
	t.Fatal("no two consecutive free ports in 100 tries")
	return 0
}

func free(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
