package chaos

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

var (
	seedFlag     = flag.Uint64("chaos.seed", 0, "seed of the random-seed run (0: pick one and print it)")
	durationFlag = flag.Duration("chaos.duration", 0, "time under faults of each run (0: the short CI default)")
	oneWayFlag   = flag.Bool("chaos.oneway", false, "include one-way partitions (off in the short runs; a stuck-member bug they exposed is fixed, see docs/correctness.md)")
	lenientFlag  = flag.Bool("chaos.lenient", false, "report liveness failures of TestChaos without failing (TestSoak always fails on them)")
	soakFlag     = flag.Duration("chaos.soak", 0, "run TestSoak: runs of -chaos.duration with fresh seeds until this much time passed")
	shardsFlag   = flag.Int("chaos.shards", 1, "latchd --shards of every member")
	tlsFlag      = flag.Bool("chaos.tls", false, "TLS on both ports of every member, client certificates required")
	authFlag     = flag.Bool("chaos.auth", false, "auth on (implies -chaos.tls): every kind of client logs in as its own non-root user")
	zkFlag       = flag.Bool("chaos.zk", false, "ZooKeeper listeners and the zk workload (go-zookeeper's lock recipe, fenced)")
	zkAuthFlag   = flag.Bool("chaos.zkauth", true, "with -chaos.auth and -chaos.zk: ZooKeeper clients log in as their own user (a certificate naming it and digest credentials); "+
		"=false (for a latchd whose ZooKeeper port refuses clients once auth is on) makes TestSoak alternate runs with auth and runs of the zk workload without auth")
	zkShardedFlag = flag.Bool("chaos.zksharded", true, "ZooKeeper clients on a sharded cluster in the same runs; =false (for a latchd whose ZooKeeper port "+
		"refuses watches outside shard 0 with more than one shard) makes the runs with ZooKeeper clients use one shard")
	diskFlag  = flag.Bool("chaos.disk", false, "the disk-full fault: every member's data directory its own small tmpfs (needs root)")
	watchFlag = flag.String("chaos.watch", "auto", "the watch workload: on, off, or auto (on: watches work across shards)")
)

func TestMain(m *testing.M) {
	if encoded, ok := os.LookupEnv(lockClientEnv); ok {
		os.Exit(lockClientMain(encoded)) // a lockproc client process, not the tests
	}
	flag.Parse()
	code := m.Run()
	proccluster.RemoveBuild()
	os.Exit(code)
}

// fixedSeed is the CI run's seed; the random run's seed is printed.
const fixedSeed = 20261129

func shortDuration() time.Duration {
	if *durationFlag > 0 {
		return *durationFlag
	}
	return 10 * time.Second
}

func config(seed uint64) Config {
	cfg := Config{Seed: seed, Duration: shortDuration(), Shards: *shardsFlag, Partitions: proccluster.NetnsAvailable() == nil, OneWay: *oneWayFlag, LeaderTransfers: true, MemberReplacements: true, UnsyncedCrashes: true, ClockFaults: true,
		TLS: *tlsFlag || *authFlag, Auth: *authFlag, ZK: *zkFlag, ZKAuth: *zkAuthFlag, DiskFaults: *diskFlag && os.Geteuid() == 0}
	if !watchesOn(cfg.Shards) {
		cfg.Workloads = append(withoutWatch(), "zk")
	}
	return cfg
}

// soakConfig is run k of TestSoak. ZooKeeper clients share every run with
// the shards and auth unless -chaos.zksharded=false or
// -chaos.zkauth=false (for an older latchd): then even runs have the shards and auth, no
// ZooKeeper clients; odd runs the zk workload on one shard, with auth
// unless -chaos.zkauth=false (and the watch workload, which one shard
// allows). Both keep TLS, every other workload and every fault.
func soakConfig(seed uint64, k int) Config {
	cfg := config(seed)
	if !cfg.ZK {
		return cfg
	}
	if (cfg.Auth && !cfg.ZKAuth) || (cfg.Shards > 1 && !*zkShardedFlag) {
		if k%2 == 0 {
			cfg.ZK = false
			return cfg
		}
		cfg.Auth = cfg.Auth && cfg.ZKAuth
		if !*zkShardedFlag {
			cfg.Shards = 1
		}
		if watchesOn(cfg.Shards) {
			cfg.Workloads = nil
		}
	}
	return cfg
}

// watchesOn says whether the watch workload runs on a cluster of shards
// (-chaos.watch): by default it does, whatever the number of shards.
func watchesOn(shards int) bool {
	return *watchFlag != "off"
}

// withoutWatch is every workload but watch.
func withoutWatch() []string {
	return slices.DeleteFunc(slices.Clone(workloadNames), func(name string) bool { return name == "watch" })
}

func runAndReport(t *testing.T, cfg Config) Report {
	t.Helper()
	t.Logf("chaos: seed %d (rerun with -chaos.seed=%d), %v under faults, partitions %v, shards %d, TLS %v, auth %v, ZooKeeper clients %v (with auth %v), workloads %v",
		cfg.Seed, cfg.Seed, cfg.Duration, cfg.Partitions, max(cfg.Shards, 1), cfg.TLS, cfg.Auth, cfg.ZK, cfg.Auth && cfg.ZKAuth, cfg.Workloads)
	report := Run(t, cfg)
	for _, a := range report.Anomalies {
		t.Logf("anomaly: %s", a)
	}
	t.Log(report.Summary())
	return report
}

// TestChaos runs the suite twice on a 5-node cluster: with the fixed seed
// and with a random (printed) one. Any anomaly fails it.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process fault suite")
	}
	random := *seedFlag
	if random == 0 {
		random = rand.Uint64() % 1_000_000_000
	}
	for _, tt := range []struct {
		name string
		seed uint64
	}{{"fixed", fixedSeed}, {"random", random}} {
		t.Run(tt.name, func(t *testing.T) {
			report := runAndReport(t, config(tt.seed))
			for _, a := range report.Anomalies {
				if strings.HasPrefix(a, "liveness:") && *lenientFlag {
					t.Logf("liveness failure, not failing (-chaos.lenient): %s", a)
					continue
				}
				t.Error(a)
			}
		})
	}
}

// TestSoak is the long run, only when -chaos.soak asks for it; the command
// of the soak across everything is in docs/correctness.md.
func TestSoak(t *testing.T) {
	if *soakFlag == 0 {
		t.Skip("the soak runs only when asked: -chaos.soak=20m (docs/correctness.md has the command); TestSoakSmoke is its short form")
	}
	total := Report{Seed: *seedFlag, Faults: map[string]int{}}
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64() % 1_000_000_000
	}
	total.Seed = seed
	deadline := time.Now().Add(*soakFlag)
	kinds := map[string]int{} // runs by runKind
	duration := *durationFlag
	if duration == 0 {
		duration = 2 * time.Minute
	}
	for run := 0; time.Now().Before(deadline); run++ {
		cfg := soakConfig(seed+uint64(run), run)
		cfg.Duration = min(duration, max(10*time.Second, time.Until(deadline)))
		var report Report
		t.Run("run", func(t *testing.T) { report = runAndReport(t, cfg) })
		total.Merge(report)
		kinds[runKind(cfg)]++
		t.Logf("soak so far: %s", total.Summary())
	}
	t.Logf("SOAK runs: %v", kinds)
	t.Logf("SOAK: %s", total.Summary())
	if len(total.Anomalies) > 0 {
		t.Fatalf("%d anomalies", len(total.Anomalies))
	}
}

// TestSoakSmoke is the soak's short form for CI: TestSoak's first two runs
// (soakConfig, -chaos.shards=4 -chaos.auth -chaos.zk -chaos.disk
// -chaos.zksharded=false), 12 s under faults each: TLS, auth and every
// fault class in both; 4 shards (each kind of client its own non-root
// user) in the first, the ZooKeeper clients on one shard in the second.
// The ZooKeeper clients are kept to one run: go-zookeeper v1.0.4 has a
// data race of its own (Conn.lastZxid, written by recvLoop as
// sendSetWatches reads it when a connection holding watches reconnects
// while a reply comes), which CI's -race reports as the test's failure;
// TestSoak (run without -race) has them in every run, and the zkserver
// tests cover the ZooKeeper port on shards. Any anomaly fails it.
func TestSoakSmoke(t *testing.T) {
	seed := shortSuiteSeed(t)
	for k, name := range []string{"auth", "zk"} {
		t.Run(name, func(t *testing.T) {
			cfg := smokeConfig(seed+uint64(k), k)
			report := runAndReport(t, cfg)
			for _, a := range report.Anomalies {
				t.Error(a)
			}
			if cfg.ZK && report.ZKEntries == 0 {
				t.Error("no ZooKeeper lock holder's write was checked")
			}
		})
	}
}

// smokeConfig is soakConfig for run k as if the soak's flags were given.
func smokeConfig(seed uint64, k int) Config {
	shards, auth, zk, disk, zkSharded := *shardsFlag, *authFlag, *zkFlag, *diskFlag, *zkShardedFlag
	defer func() {
		*shardsFlag, *authFlag, *zkFlag, *diskFlag, *zkShardedFlag = shards, auth, zk, disk, zkSharded
	}()
	*shardsFlag, *authFlag, *zkFlag, *diskFlag, *zkShardedFlag = 4, true, true, true, false
	cfg := soakConfig(seed, k)
	cfg.Duration = 12 * time.Second
	return cfg
}

// shortSuiteSeed skips t under -short, else returns -chaos.seed, or the
// fixed seed without it.
func shortSuiteSeed(t *testing.T) uint64 {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process fault suite")
	}
	if *seedFlag != 0 {
		return *seedFlag
	}
	return fixedSeed
}

// runKind names what a run's cluster had: its shards, TLS, auth, ZooKeeper
// clients and watches.
func runKind(cfg Config) string {
	return fmt.Sprintf("shards=%d tls=%v auth=%v zk=%v watch=%v", max(cfg.Shards, 1), cfg.TLS, cfg.Auth, cfg.ZK,
		len(cfg.Workloads) == 0 || slices.Contains(cfg.Workloads, "watch"))
}
