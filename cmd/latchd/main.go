// Command latchd runs a latch server. With no flags it is a single-node
// development server with its data in ./latch-data and the client API on
// 127.0.0.1:2379. 'latchd restore FILE ...' instead prepares the data
// directory of a member of a new cluster seeded from a backup file and exits
// (docs/operations.md "Backup and restore").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/signal"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/latch-io/latch/internal/buildinfo"
	"github.com/latch-io/latch/internal/httpapi"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/timeline"
	"github.com/latch-io/latch/internal/tlsconfig"
	"github.com/latch-io/latch/internal/vfs"
)

func main() {
	err := run(os.Args[1:])
	var usage usageError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		// the usage is printed; asking for it is not a failure
	case errors.Is(err, errVersion):
		fmt.Println(buildinfo.Read("latchd"))
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "latchd: %v\nrun 'latchd --help' for usage\n", err)
		os.Exit(exitUsage)
	default:
		fmt.Fprintln(os.Stderr, "latchd:", err)
		os.Exit(exitFailure)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "restore" {
		return runRestore(args[1:])
	}
	limits := httpapi.DefaultLimits()
	var security securityFlags
	var zk zkOptions
	cfg, logLevel, pprof, err := parseFlags(args, &limits, &security, &zk)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	cfg.Logger = logger
	procs := shareProcessors(cfg.Name, cfg.InitialCluster, os.Getenv("GOMAXPROCS"))
	stopClockControl := make(chan struct{})
	defer close(stopClockControl)
	followClockControl(cfg.Clock, logger, stopClockControl)
	clientTLS, err := security.apply(&cfg, logger)
	if err != nil {
		return err
	}

	// Bind the client port before recovering, so a port clash fails fast.
	ln, err := net.Listen("tcp", cfg.ClientAddr)
	if err != nil {
		return fmt.Errorf("listen for clients: %w", err)
	}
	if clientTLS != nil {
		ln = tlsconfig.WrapListener(ln, clientTLS)
	}
	zkln, err := listenZK(zk)
	if err != nil {
		ln.Close()
		return err
	}
	if zkln != nil && clientTLS != nil {
		// The ZooKeeper port is a client port: same certificates, same rules.
		zkln = tlsconfig.WrapListener(zkln, clientTLS)
	}
	s, err := server.New(cfg)
	if err != nil {
		ln.Close()
		if zkln != nil {
			zkln.Close()
		}
		return err
	}
	apiHandler := httpapi.New(s, logger)
	var handler http.Handler = apiHandler
	if pprof {
		handler = withProfiling(apiHandler)
	}
	httpServer := httpapi.NewServer(handler, limits, logger)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(ln) }()
	logger.Info("latchd serving", "name", cfg.Name, "client", cfg.ClientAddr, "peer", cfg.PeerAddr, "data", cfg.DataDir,
		"client_tls", clientTLS != nil, "peer_tls", cfg.PeerServerTLS != nil, "wal_flush", flushDescription(cfg.FlushMethod), "procs", procs)
	zkServer := serveZK(zkln, s, zk, limits.MaxConnections, logger)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case sig := <-signals:
		logger.Info("stopping", "signal", sig.String())
	case <-s.Done():
	case err := <-serveErr:
		logger.Error("client listener failed", "err", err)
	case err := <-zkServer.failed():
		logger.Error("ZooKeeper listener failed", "err", err)
	}
	zkServer.close()
	if err := timeline.Dump(); err != nil {
		logger.Error("write timeline", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = httpServer.Shutdown(ctx)
	closeErr := s.Close()
	if err := s.Err(); errors.Is(err, server.ErrRemoved) {
		logger.Info("removed from the cluster; exiting")
		return nil
	} else if err != nil {
		return fmt.Errorf("stopped on a fatal error: %w", err)
	}
	if closeErr != nil && !errors.Is(closeErr, net.ErrClosed) {
		return closeErr
	}
	return nil
}

// withProfiling serves net/http/pprof under /debug/pprof/ beside the API,
// to the callers api lets make admin calls (anyone while auth is off). Only that prefix is pprof's; every
// other request goes to api as it came (no http.ServeMux in front: it would
// clean paths and redirect those the API refuses, docs/api.md). A path under
// the prefix that is not clean is the API's too, so a 404, not a redirect.
func withProfiling(api *httpapi.Handler) http.Handler {
	profiles := api.AdminGated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, pprofPrefix) {
		case "profile":
			httppprof.Profile(w, r)
		case "trace":
			httppprof.Trace(w, r)
		case "symbol":
			httppprof.Symbol(w, r)
		default: // the index, and each named profile (heap, goroutine, ...)
			httppprof.Index(w, r)
		}
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; strings.HasPrefix(p, pprofPrefix) && (p == pprofPrefix || path.Clean(p) == p) {
			profiles.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// flushFlag is --wal-flush.
type flushFlag struct{ method *vfs.FlushMethod }

func (f flushFlag) String() string {
	if f.method == nil {
		return "" // the zero flag.Value: --help then prints the default, auto
	}
	return f.method.String()
}

func (f flushFlag) Set(s string) error {
	m, ok := vfs.ParseFlushMethod(s)
	if !ok {
		return fmt.Errorf("%q is neither auto nor fsync", s)
	}
	*f.method = m
	return nil
}

// flushDescription says how this process flushes, for the start-up log.
func flushDescription(m vfs.FlushMethod) string {
	if m == vfs.FlushSyscall {
		return "fsync"
	}
	if ok, err := vfs.RingFlushes(); !ok {
		return fmt.Sprintf("fsync (io_uring unavailable: %v)", err)
	}
	return "io_uring"
}

// pprofPrefix is the path prefix of the Go profiles (--enable-pprof).
const pprofPrefix = "/debug/pprof/"

// usage prints the flags as the flag package does, leaving out the
// test-only "unsafe-" ones.
func usage(fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "unsafe-") {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue // not the value parsed so far
		}
	})
	fmt.Fprintf(shown.Output(), "Usage of %s:\n", fs.Name())
	shown.PrintDefaults()
}

func parseFlags(args []string, limits *httpapi.Limits, security *securityFlags, zk *zkOptions) (server.Config, slog.Level, bool, error) {
	fs := flag.NewFlagSet("latchd", flag.ContinueOnError)
	var (
		cfg          server.Config
		initial      string
		logLevel     string
		pprof        bool
		clusterState string
	)
	fs.StringVar(&cfg.Name, "name", server.DefaultName, "this member's name, unique in the cluster")
	fs.StringVar(&cfg.DataDir, "data-dir", server.DefaultDataDir, "directory of the WAL and snapshots")
	fs.StringVar(&cfg.ClientAddr, "listen-client", server.DefaultClientAddr, "host:port of the client HTTP API")
	fs.StringVar(&cfg.AdvertiseClientURL, "advertise-client", "", "URL clients reach this server at, for leader hints (default http://<listen-client>)")
	fs.StringVar(&cfg.PeerAddr, "listen-peer", server.DefaultPeerAddr, "host:port of the peer transport")
	fs.StringVar(&initial, "initial-cluster", "", "name=host:port of every initial member's peer address, comma-separated (default: this member alone)")
	fs.StringVar(&clusterState, "initial-cluster-state", "new", "new: bootstrap the cluster; existing: join a running one that already added this member")
	fs.StringVar(&cfg.ClusterToken, "cluster-token", "latch", "name of the cluster; peers with another token are refused")
	fs.Uint64Var(&cfg.SnapshotEvery, "snapshot-count", server.DefaultSnapshotEvery, "applied entries between snapshots")
	fs.Uint64Var(&cfg.SnapshotBytes, "snapshot-bytes", server.DefaultSnapshotBytes, "bytes of applied entries that trigger a snapshot before --snapshot-count")
	fs.IntVar(&cfg.MaxValueSize, "max-value-size", server.DefaultMaxValueSize, "largest value in bytes (at most 1 MiB)")
	fs.DurationVar(&cfg.TickInterval, "tick", 100*time.Millisecond, "raft tick interval")
	fs.IntVar(&cfg.ElectionTicks, "election-ticks", 10, "election timeout in ticks")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", 5*time.Second, "deadline of a write or a linearizable read")
	fs.DurationVar(&cfg.MinSessionTTL, "min-session-timeout", 2*time.Second, "smallest session timeout granted")
	fs.DurationVar(&cfg.MaxSessionTTL, "max-session-timeout", 60*time.Second, "largest session timeout granted")
	fs.BoolVar(&cfg.UnsafeLocalReads, "unsafe-local-reads", false, "TEST ONLY (planted bug for internal/testkit/chaos): serve linearizable reads from local state; hidden, never use")
	fs.BoolVar(&cfg.UnsafeNoSync, "unsafe-no-sync", false, "TEST ONLY (planted bug for internal/testkit/chaos): acknowledge writes without fsyncing the WAL; hidden, never use")
	fs.Int64Var(&cfg.WALSegmentSize, "unsafe-wal-segment-size", 0, "TEST ONLY (full-disk tests): preallocated size of a WAL segment in bytes (0: 64 MiB); hidden")
	fs.Var(&clockControlFlag{cfgClock: &cfg.Clock}, "unsafe-clock-control", "TEST ONLY (clock faults for internal/testkit/chaos): run on a skewed clock whose rate and wall offset this file sets ('rate=0.5 wall=-1h'), read every 50ms; hidden, never use")
	fs.StringVar(&cfg.UnsafeSyncJournal, "unsafe-sync-journal", "", "TEST ONLY (crash faults for internal/testkit/proccluster): record what each fsync made durable in this file, outside --data-dir; hidden, never use")
	fs.IntVar(&cfg.MaxWatchesPerSession, "max-watches-per-session", 1000, "watches one session may hold")
	fs.DurationVar(&cfg.Auth.TokenTTL, "auth-token-ttl", time.Hour, "how long a login token is valid")
	fs.Float64Var(&cfg.Auth.UserRate, "auth-user-rate", 0, "requests per second one user may make on this member once auth is enabled (0: no limit)")
	fs.IntVar(&cfg.Auth.UserBurst, "auth-user-burst", 0, "burst of --auth-user-rate (0: one second's worth)")
	fs.IntVar(&cfg.Auth.MaxUserSessions, "auth-max-user-sessions", 0, "live sessions one user may hold once auth is enabled (0: no cap)")
	fs.IntVar(&cfg.Auth.MaxUserWatches, "auth-max-user-watches", 0, "watches one user may hold on this member once auth is enabled (0: no cap)")
	fs.Float64Var(&cfg.Auth.LoginRate, "auth-login-rate", 5, "password checks (logins, ZooKeeper addauth) per second per user name and per source address (negative: no limit)")
	fs.IntVar(&cfg.Auth.LoginBurst, "auth-login-burst", 20, "burst of --auth-login-rate")
	fs.Var(flushFlag{&cfg.FlushMethod}, "wal-flush", "how the WAL and snapshots are flushed to disk: auto (through io_uring where the kernel allows it, else fsync) or fsync (always the fsync system call); both wait for the same fsync")
	fs.IntVar(&cfg.WatchQueueLen, "watch-queue-len", 1024, "undelivered events per session before its stream is cut (slow consumer)")
	fs.IntVar(&cfg.Shards, "shards", 1, "number of shards (consensus groups), fixed when the cluster is created (1 to 1024)")
	fs.IntVar(&cfg.MaxPending, "max-pending-proposals", 20000, "proposals waiting at once before writes get 429")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&pprof, "enable-pprof", false, "serve Go profiles under /debug/pprof/ on the client address")
	showVersion := fs.Bool("version", false, "print the version and the VCS revision, and exit")
	limits.AddFlags(fs)
	security.addFlags(fs)
	zk.addFlags(fs)
	fs.Usage = func() { usage(fs) }
	fs.SetOutput(io.Discard) // flagError reports a bad flag once
	if err := fs.Parse(args); err != nil {
		return cfg, 0, false, flagError(fs, err)
	}
	if *showVersion {
		return cfg, 0, false, errVersion
	}
	if err := validateFlags(fs, &cfg, initial, clusterState, logLevel); err != nil {
		return cfg, 0, false, usageError{err}
	}
	if err := limits.Validate(); err != nil {
		return cfg, 0, false, usageError{err}
	}
	if err := security.validate(&cfg); err != nil {
		return cfg, 0, false, usageError{err}
	}
	if err := zk.validate(); err != nil {
		return cfg, 0, false, usageError{err}
	}
	if err := security.checkClearText("--listen-zk", zk.addr); err != nil {
		return cfg, 0, false, usageError{err}
	}
	return cfg, logLevels[logLevel], pprof, nil
}
