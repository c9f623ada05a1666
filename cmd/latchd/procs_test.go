package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestSharedProcs(t *testing.T) {
	three := map[string]string{"n1": "127.0.0.1:2380", "n2": "127.0.0.1:2381", "n3": "127.0.0.1:2382"}
	cases := []struct {
		name       string
		procs      int
		self       string
		initial    map[string]string
		want, here int
	}{
		{"alone", 2, "n1", map[string]string{"n1": "127.0.0.1:2380"}, 2, 1},
		{"three on loopback, two cores", 2, "n1", three, 1, 3},
		{"three on loopback, sixteen cores", 16, "n2", three, 5, 3},
		{"loopback addresses differ", 4, "n1", map[string]string{"n1": "127.0.0.1:2380", "n2": "127.0.0.2:2380", "n3": "[::1]:2380"}, 1, 3},
		{"localhost is loopback", 4, "n1", map[string]string{"n1": "localhost:2380", "n2": "127.0.0.1:2381"}, 2, 2},
		{"two of three on this host", 8, "a", map[string]string{"a": "10.0.0.1:2380", "b": "10.0.0.1:2381", "c": "10.0.0.2:2380"}, 4, 2},
		{"each on its own host", 8, "a", map[string]string{"a": "10.0.0.1:2380", "b": "10.0.0.2:2380", "c": "10.0.0.3:2380"}, 8, 1},
		{"a remote member is not on loopback's machine", 8, "a", map[string]string{"a": "127.0.0.1:2380", "b": "10.0.0.2:2380"}, 8, 1},
		{"not in the list", 8, "x", three, 8, 1},
		{"one address spelled two ways", 8, "a", map[string]string{"a": "[2001:DB8::1]:2380", "b": "[2001:db8::1]:2381"}, 4, 2},
		{"one name in two cases", 8, "a", map[string]string{"a": "Host.example:2380", "b": "host.example.:2381"}, 4, 2},
	}
	for _, c := range cases {
		got, here := sharedProcs(c.procs, c.self, c.initial)
		if got != c.want || here != c.here {
			t.Errorf("%s: sharedProcs(%d) = %d for %d members here, want %d for %d", c.name, c.procs, got, here, c.want, c.here)
		}
	}
}

// TestShareProcessors: an explicit GOMAXPROCS and a CPU limit (fewer
// processors than cores) are left alone; otherwise, with or without a
// GOMAXPROCS the runtime ignores, three members on loopback divide the
// cores.
func TestShareProcessors(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	three := map[string]string{"n1": "127.0.0.1:2380", "n2": "127.0.0.1:2381", "n3": "127.0.0.1:2382"}
	if got := shareProcessors("n1", three, "2"); runtime.GOMAXPROCS(0) != before || !strings.Contains(got, "GOMAXPROCS") {
		t.Fatalf("with GOMAXPROCS set: %q, processors %d (were %d)", got, runtime.GOMAXPROCS(0), before)
	}
	if runtime.NumCPU() > 1 {
		runtime.GOMAXPROCS(runtime.NumCPU() - 1)
		got := shareProcessors("n1", three, "")
		if runtime.GOMAXPROCS(0) != runtime.NumCPU()-1 || !strings.Contains(got, "a CPU limit") {
			t.Fatalf("with fewer processors than cores: %q, processors %d", got, runtime.GOMAXPROCS(0))
		}
	}
	for _, env := range []string{"", "0", "-1", "abc"} { // the runtime ignores the last three
		runtime.GOMAXPROCS(runtime.NumCPU())
		got := shareProcessors("n1", three, env)
		want := max(1, runtime.NumCPU()/3)
		if runtime.GOMAXPROCS(0) != want || (want != runtime.NumCPU() && !strings.Contains(got, "shared by 3 members")) {
			t.Fatalf("GOMAXPROCS=%q: %q, processors %d, want %d", env, got, runtime.GOMAXPROCS(0), want)
		}
	}
}
