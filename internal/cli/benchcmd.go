package cli

// The benchmark commands (bench, session-bench, lock-bench): their flags and
// help. The load generators they run are internal/loadgen.

import (
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/loadgen"
)

// fromLoadgen reports a load generator's refusal (a *loadgen.UsageError) as
// latchctl's usage error; other errors pass unchanged.
func fromLoadgen(err error) error {
	var usage *loadgen.UsageError
	if errors.As(err, &usage) {
		return usageError{err}
	}
	return err
}

func (a *app) benchCommand() *cobra.Command {
	cfg := loadgen.BenchConfig{}
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "generate load over the HTTP API and report ops/s and latency percentiles",
		Long: "bench runs --clients goroutines, each sending requests back to back for --duration,\n" +
			"and reports successful ops/s, errors by code, and p50/p99/p99.9 latency of the\n" +
			"successful ones (a latency includes the client library's retries, if any). Each client\n" +
			"starts on a random endpoint and fails over like any client. get and mixed first write\n" +
			"the --keys keys under --prefix. Example (the 256-client write figure):\n" +
			"  latchctl bench --endpoints http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003 \\\n" +
			"    --op put --clients 256 --duration 20s --value-size 256",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.Validate(); err != nil {
				return fromLoadgen(err)
			}
			if cfg.Seed == 0 {
				cfg.Seed = uint64(time.Now().UnixNano())
			}
			result, err := loadgen.Profiled(cpuProfile, func() (*loadgen.BenchResult, error) {
				return loadgen.RunBench(cmd.Context(), a.connection(), cfg)
			})
			return a.printResult(result, fromLoadgen(err), func(w io.Writer) { loadgen.PrintBench(w, result) })
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&cfg.Op, "op", "put", "operation: put, get or mixed")
	flags.StringVar(&cfg.Consistency, "consistency", api.Linearizable, "reads: linearizable or stale")
	flags.IntVar(&cfg.Clients, "clients", 1, "concurrent clients, each doing requests back to back")
	flags.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	flags.IntVar(&cfg.ValueSize, "value-size", 256, "bytes per written value")
	flags.IntVar(&cfg.Keys, "keys", 1000, "distinct keys, chosen uniformly at random")
	flags.Float64Var(&cfg.ReadFraction, "read-fraction", 0.9, "share of reads in --op mixed")
	flags.StringVar(&cfg.Prefix, "prefix", "/bench", "parent node of the keys")
	flags.IntVar(&cfg.Dirs, "dirs", 0, "spread the keys over this many directories under --prefix (a sharded cluster places a directory's children in one shard)")
	flags.Uint64Var(&cfg.Seed, "seed", 0, "seed of key choice (0: from the clock; printed)")
	flags.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator to this file")
	return cmd
}

func (a *app) lockBenchCommand() *cobra.Command {
	cfg := loadgen.LockBenchConfig{}
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "lock-bench",
		Short: "measure lock acquire+release cycles/s and acquire latency with many clients on one or many locks",
		Long: "lock-bench runs --clients workers, each with a client and a session of its own, that\n" +
			"acquire and release (client/recipe.Lock) back to back for --duration; worker i uses lock\n" +
			"PREFIX-(i mod --locks). It reports cycles/s, p50/p99 latency of Acquire (queueing behind\n" +
			"the other holders of the same lock included) and of Release, the raft entries written per\n" +
			"cycle, and each server's CPU over the run. Example (the figures of docs/benchmarks.md):\n" +
			"  latchctl lock-bench --endpoints http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003 \\\n" +
			"    --clients 16 --locks 1 --duration 20s",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.Validate(); err != nil {
				return fromLoadgen(err)
			}
			result, err := loadgen.Profiled(cpuProfile, func() (*loadgen.LockBenchResult, error) {
				return loadgen.RunLockBench(cmd.Context(), a.connection(), cfg)
			})
			return a.printResult(result, fromLoadgen(err), func(w io.Writer) { loadgen.PrintLockBench(w, result) })
		},
	}
	flags := cmd.Flags()
	flags.IntVar(&cfg.Clients, "clients", 16, "concurrent workers, each with its own client and session")
	flags.IntVar(&cfg.Locks, "locks", 1, "distinct locks the workers spread over")
	flags.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	flags.DurationVar(&cfg.SessionTimeout, "session-timeout", 10*time.Second, "timeout of the workers' sessions")
	flags.StringVar(&cfg.Prefix, "prefix", "lock-bench", "lock names are PREFIX-N")
	flags.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the load generator to this file")
	return cmd
}

func (a *app) sessionBenchCommand() *cobra.Command {
	cfg := loadgen.SessionBenchConfig{}
	cmd := &cobra.Command{
		Use:   "session-bench",
		Short: "create many sessions, keep them alive with batched heartbeats, report what they cost the servers",
		Long: "session-bench creates --sessions sessions (at most --rate a second, --concurrency at once), keeps\n" +
			"them alive with batched heartbeats (--batch ids a call) every --interval for --duration, and\n" +
			"reports creations/s, heartbeat latency p50/p99, spurious expiries, and from every endpoint's\n" +
			"/metrics the applied index delta over the heartbeat phase (heartbeats make no log entries),\n" +
			"resident memory and CPU. Example (the 20,000-session figure):\n" +
			"  latchctl session-bench --endpoints http://127.0.0.1:7001,http://127.0.0.1:7002,http://127.0.0.1:7003 \\\n" +
			"    --sessions 20000 --interval 3s --duration 5m",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.Validate(); err != nil {
				return fromLoadgen(err)
			}
			result, err := loadgen.RunSessionBench(cmd.Context(), a.connection(), cfg, a.io.Stderr)
			return a.printResult(result, fromLoadgen(err), func(w io.Writer) { loadgen.PrintSessionBench(w, result) })
		},
	}
	flags := cmd.Flags()
	flags.IntVar(&cfg.Sessions, "sessions", 20000, "sessions to create and keep alive")
	flags.Float64Var(&cfg.Rate, "rate", 0, "target creations a second (0: as fast as --concurrency allows)")
	flags.IntVar(&cfg.Concurrency, "concurrency", 256, "session creations in flight at once")
	flags.DurationVar(&cfg.Timeout, "session-timeout", 10*time.Second, "timeout asked for each session")
	flags.DurationVar(&cfg.Interval, "interval", 3*time.Second, "heartbeat interval of every session")
	flags.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "length of the heartbeat phase")
	flags.IntVar(&cfg.Batch, "batch", 400, "session ids per heartbeat call (the server bounds request bodies)")
	flags.BoolVar(&cfg.Close, "close", true, "close the sessions at the end (else they expire)")
	return cmd
}
