package main

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
)

// Processors for members that share a machine.
//
// Go gives a process as many processors (GOMAXPROCS) as the machine has
// cores, or fewer where a cgroup's CPU limit or the CPU affinity says so.
// Several members of one cluster on one machine with neither (a
// development or test cluster, a side-by-side benchmark) then run more
// processors than there are cores, and every goroutine a member readies
// while one of its processors idles wakes another thread to run it: at low
// load a write pays several such cross-thread wake-ups on each member
// (docs/benchmarks.md, "One processor share per co-located member"). So,
// unless GOMAXPROCS is set in the environment, or Go already chose fewer
// processors than the machine's cores (a container's limit: the members
// are not sharing the whole machine), a member divides them by the number
// of the cluster's members on this machine: those whose --initial-cluster
// peer address is a loopback address (when its own is one too) or the same
// host as its own. Setting the processors turns off the Go runtime's later
// updates of them (a CPU limit changed while the member runs).

// sharedProcs returns the processors a member should run with: procs (what
// Go chose) divided among the members of initial on the same machine as
// self, at least 1, and how many members that is.
func sharedProcs(procs int, self string, initial map[string]string) (int, int) {
	own, ok := initial[self]
	if !ok {
		return procs, 1
	}
	here := 0
	for _, addr := range initial {
		if sameMachine(own, addr) {
			here++
		}
	}
	return max(1, procs/max(here, 1)), here
}

// peerHost is the host of a host:port peer address (the whole string if it
// has no port).
func peerHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// sameMachine reports whether two host:port peer addresses are on one
// machine as far as the addresses say: the same host (the same IP address
// however spelled, or the same name in any case), or both loopback.
func sameMachine(a, b string) bool {
	return canonicalHost(peerHost(a)) == canonicalHost(peerHost(b)) || (isLoopback(a) && isLoopback(b))
}

// canonicalHost spells an IP address one way, and a name in lower case
// without a trailing dot.
func canonicalHost(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// shareProcessors applies sharedProcs unless the environment's GOMAXPROCS
// sets the processors (a positive number; the runtime ignores any other)
// or Go chose fewer than the machine's cores, and describes the outcome for
// the start-up log.
func shareProcessors(self string, initial map[string]string, env string) string {
	procs := runtime.GOMAXPROCS(0)
	if n, err := strconv.Atoi(env); err == nil && n > 0 {
		return fmt.Sprintf("%d (GOMAXPROCS)", procs)
	}
	if procs < runtime.NumCPU() {
		return fmt.Sprintf("%d (of %d cores: a CPU limit)", procs, runtime.NumCPU())
	}
	share, members := sharedProcs(procs, self, initial)
	if members <= 1 || share == procs {
		return fmt.Sprint(procs)
	}
	runtime.GOMAXPROCS(share)
	return fmt.Sprintf("%d (%d processors shared by %d members on this machine)", share, procs, members)
}
