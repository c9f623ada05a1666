package loadgen

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
)

// validator is what each benchmark's config is checked by.
type validator interface{ Validate() error }

// TestValidateRefusesWithUsageError checks that every config a run cannot
// use is refused with a *UsageError naming the flag, which latchctl turns
// into a usage error, and that a usable one passes.
func TestValidateRefusesWithUsageError(t *testing.T) {
	kv := func(edit func(*BenchConfig)) *BenchConfig {
		cfg := &BenchConfig{Op: "put", Consistency: api.Linearizable, Clients: 1, Duration: time.Second,
			ValueSize: 8, Keys: 1, ReadFraction: 0.5, Prefix: "/bench"}
		edit(cfg)
		return cfg
	}
	lock := func(edit func(*LockBenchConfig)) *LockBenchConfig {
		cfg := &LockBenchConfig{Clients: 1, Locks: 1, Duration: time.Second, SessionTimeout: time.Second, Prefix: "lock-bench"}
		edit(cfg)
		return cfg
	}
	session := func(edit func(*SessionBenchConfig)) *SessionBenchConfig {
		cfg := &SessionBenchConfig{Sessions: 1, Concurrency: 1, Timeout: time.Second, Interval: time.Second,
			Duration: time.Second, Batch: 1}
		edit(cfg)
		return cfg
	}
	tests := []struct {
		name    string
		cfg     validator
		refused string // a part of the refusal, or "" if accepted
	}{
		{"bench accepts put", kv(func(*BenchConfig) {}), ""},
		{"bench accepts mixed", kv(func(c *BenchConfig) { c.Op = "mixed" }), ""},
		{"bench unknown op", kv(func(c *BenchConfig) { c.Op = "cas" }), "--op"},
		{"bench unknown consistency", kv(func(c *BenchConfig) { c.Consistency = "eventual" }), "--consistency"},
		{"bench no clients", kv(func(c *BenchConfig) { c.Clients = 0 }), "--clients"},
		{"bench read fraction above 1", kv(func(c *BenchConfig) { c.ReadFraction = 1.5 }), "--read-fraction"},
		{"bench bad prefix", kv(func(c *BenchConfig) { c.Prefix = "no-slash" }), "--prefix"},
		{"bench more dirs than keys", kv(func(c *BenchConfig) { c.Dirs = 2 }), "--dirs"},
		{"bench negative dirs", kv(func(c *BenchConfig) { c.Dirs = -1 }), "--dirs"},
		{"lock-bench accepts", lock(func(*LockBenchConfig) {}), ""},
		{"lock-bench no locks", lock(func(c *LockBenchConfig) { c.Locks = 0 }), "--locks"},
		{"lock-bench prefix with a slash", lock(func(c *LockBenchConfig) { c.Prefix = "a/b" }), "--prefix"},
		{"session-bench accepts", session(func(*SessionBenchConfig) {}), ""},
		{"session-bench no batch", session(func(c *SessionBenchConfig) { c.Batch = 0 }), "--batch"},
		{"session-bench negative rate", session(func(c *SessionBenchConfig) { c.Rate = -1 }), "--rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var usage *UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.refused) {
				t.Fatalf("Validate() = %v (%T), want a *UsageError naming %s", err, err, tt.refused)
			}
		})
	}
}

// TestValidateDropsReadFractionOutsideMixed checks that only --op mixed
// keeps --read-fraction, so the report of put or get does not show one.
// TestBenchKeysSpreadOverDirs: with --dirs the keys go round-robin into
// that many directories under the prefix; without, all under it.
func TestBenchKeysSpreadOverDirs(t *testing.T) {
	flat := benchKeys(BenchConfig{Prefix: "/bench", Keys: 3})
	if want := []string{"/bench/k0000000", "/bench/k0000001", "/bench/k0000002"}; !slices.Equal(flat, want) {
		t.Errorf("keys %v, want %v", flat, want)
	}
	spread := benchKeys(BenchConfig{Prefix: "/bench", Keys: 5, Dirs: 2})
	want := []string{"/bench/d0000/k0000000", "/bench/d0001/k0000001", "/bench/d0000/k0000002", "/bench/d0001/k0000003", "/bench/d0000/k0000004"}
	if !slices.Equal(spread, want) {
		t.Errorf("keys %v, want %v", spread, want)
	}
}

func TestValidateDropsReadFractionOutsideMixed(t *testing.T) {
	for _, op := range []string{"put", "get", "mixed"} {
		cfg := BenchConfig{Op: op, Consistency: api.Stale, Clients: 1, Duration: time.Second, Keys: 1,
			ReadFraction: 0.9, Prefix: "/bench"}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: Validate() = %v", op, err)
		}
		if want := map[bool]float64{true: 0.9, false: 0}[op == "mixed"]; cfg.ReadFraction != want {
			t.Errorf("%s: ReadFraction = %v, want %v", op, cfg.ReadFraction, want)
		}
	}
}

// TestReadMetricsSumsSeriesByName checks the /metrics reader: comments and
// unparsable values are skipped, and the samples of a labelled series (the
// per-shard applied index) add up under its name.
func TestReadMetricsSumsSeriesByName(t *testing.T) {
	text := "# HELP latch_raft_applied_index x\n# TYPE latch_raft_applied_index gauge\n" +
		"latch_raft_applied_index{shard=\"0\"} 40\nlatch_raft_applied_index{shard=\"1\"} 2\nprocess_resident_memory_bytes 1.5e+06\n" +
		"latch_requests_total{code=\"a b\"} 7\nbroken NaNx\n\n"
	got := map[string]float64{}
	if err := readMetrics(strings.NewReader(text), got); err != nil {
		t.Fatalf("readMetrics: %v", err)
	}
	want := map[string]float64{"latch_raft_applied_index": 42, "process_resident_memory_bytes": 1.5e6, "latch_requests_total": 7}
	if len(got) != len(want) {
		t.Fatalf("readMetrics = %v, want %v", got, want)
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}
