package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestPlantedBugs shows each checker failing on the bug it exists to
// catch, over real processes. (a) is also shown in-process by
// internal/testkit/testcluster's crashable vfs.
func TestPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process fault suite")
	}
	tests := []struct {
		name   string
		cfg    Config
		expect string // prefix of an anomaly the run must report
	}{
		{
			// Acknowledged writes that no member fsynced die with a
			// power cut of the whole cluster.
			name: "a-acknowledged-before-fsync",
			// The creates it loses must have been acknowledged before a
			// crash, however slow the machine: MinAcked.
			cfg: Config{Seed: fixedSeed, ExtraFlags: []string{"--unsafe-no-sync"}, Workloads: []string{"set"},
				UnsyncedCrashes: true, Faults: []string{"crash-unsynced-all"}, MinAcked: 20, MaxDuration: 90 * time.Second},
			expect: "D: acknowledged", // and Q: the counters restart
		},
		{
			name:   "b-local-linearizable-reads",
			cfg:    Config{Seed: fixedSeed, ExtraFlags: []string{"--unsafe-local-reads"}, Workloads: []string{"register"}},
			expect: "L: history not linearizable",
		},
		{
			name:   "c-fencing-check-skipped",
			cfg:    Config{Seed: fixedSeed, UncheckedGuard: true, Workloads: []string{"lock"}},
			expect: "F: guard accepted token",
		},
		{
			// The same bug under real lock client processes: a holder
			// SIGSTOPped until the lock moved writes with its old token.
			name: "c-fencing-check-skipped-stopped-process",
			cfg: Config{Seed: fixedSeed, UncheckedGuard: true, Workloads: []string{"lockproc"},
				Faults: []string{"pause-lock-holder"}},
			expect: "F: lock client",
		},
		{
			// The same bug under ZooKeeper clients: a holder whose session
			// ended writes with its old token once the fence moved on.
			name:   "c-fencing-check-skipped-zookeeper",
			cfg:    Config{Seed: fixedSeed, UncheckedGuard: true, ZK: true, Workloads: []string{"zk"}, Faults: []string{"kill-one"}},
			expect: "F: zk: entry",
		},
		{
			name:   "w-watch-event-lost",
			cfg:    Config{Seed: fixedSeed, DropWatchEvent: true, Workloads: []string{"watch"}},
			expect: "W: session",
		},
		{
			name:   "w-reregistered-without-known-index",
			cfg:    Config{Seed: fixedSeed, WatchWithoutKnownIndex: true, Workloads: []string{"watch"}},
			expect: "W: session",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Duration = 8 * time.Second
			tt.cfg.Partitions = config(0).Partitions
			tt.cfg.Shards = *shardsFlag
			report := Run(t, tt.cfg)
			t.Log(report.Summary())
			for _, a := range report.Anomalies {
				if strings.HasPrefix(a, tt.expect) {
					t.Logf("caught: %s", a)
					return
				}
			}
			t.Errorf("planted bug not caught: no anomaly %q in %q", tt.expect, report.Anomalies)
		})
	}
}
