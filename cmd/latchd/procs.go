package main

import (
	"fmt"
	"net"
	"runtime"
)

// Processors for members that share a machine.
//
// Go gives a process as many processors (GOMAXPROCS) as the machine, or its
// cgroup, has cores. Several members of one cluster on one machine (a
// development or test cluster, a side-by-side benchmark) then run more
// processors than there are cores, and every goroutine a member readies
// while one of its processors idles wakes another thread to run it: at low
// load a write pays several such cross-thread wake-ups on each member
// (docs/benchmarks.md, "One processor share per co-located member"). So,
// unless GOMAXPROCS is set in the environment, a member divides the
// processors Go chose by the number of the cluster's members on this
// machine: those whose --initial-cluster peer address is a loopback address
// (when its own is one too) or the same host as its own.

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
// machine as far as the addresses say: the same host, or both loopback.
func sameMachine(a, b string) bool {
	return peerHost(a) == peerHost(b) || (isLoopback(a) && isLoopback(b))
}

// shareProcessors applies sharedProcs unless the environment's GOMAXPROCS
// (set, even to Go's own default) says otherwise, and describes the
// outcome for the start-up log.
func shareProcessors(self string, initial map[string]string, env string) string {
	procs := runtime.GOMAXPROCS(0)
	if env != "" {
		return fmt.Sprintf("%d (GOMAXPROCS)", procs)
	}
	share, members := sharedProcs(procs, self, initial)
	if members <= 1 || share == procs {
		return fmt.Sprint(procs)
	}
	runtime.GOMAXPROCS(share)
	return fmt.Sprintf("%d (%d processors shared by %d members on this machine)", share, procs, members)
}
