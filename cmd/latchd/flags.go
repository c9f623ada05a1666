package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/latch-io/latch/api"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/server"
)

// Exit codes of latchd.
const (
	exitFailure = 1 // the server could not start, or stopped on an error
	exitUsage   = 2 // a bad command line: an unknown flag, or a flag's value out of range
)

// Limits of the flags that size in-memory structures; a value beyond them
// is a typo, not a configuration.
const (
	maxWatchesPerSessionLimit = 1 << 20
	watchQueueLenLimit        = 1 << 20
	maxPendingLimit           = 1 << 24
	maxClusterTokenLen        = 255
)

// heartbeatTicks is the raft heartbeat interval in ticks (raftnode's
// default); the election timeout must be longer.
const heartbeatTicks = 1

// errVersion is parseFlags' answer to --version: main prints the build and
// exits 0.
var errVersion = errors.New("version requested")

// usageError is a bad command line. main prints it once, on one line, with
// a pointer to --help, and exits exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// flagError turns the error of fs.Parse (whose own output is discarded, so
// nothing was printed yet) into what main reports: for -h/--help the usage
// on stdout and flag.ErrHelp, otherwise a usageError.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return flag.ErrHelp
	}
	return usageError{err}
}

// checkMemberName says what is wrong with a member name, or nil (the
// membership API's rule, so an added member can be started by its name).
func checkMemberName(name string) error { return api.CheckMemberName(name) }

// hostnamePattern is one DNS label; a host name is labels joined by dots.
var hostnamePattern = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$`)

// checkHostPort says what is wrong with a host:port address, or nil. An
// empty host (":2379", every interface) is allowed only if anyHost.
func checkHostPort(addr string, anyHost bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	if host == "" {
		if anyHost {
			return nil
		}
		return errors.New("want host:port with a host that peers can reach")
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if len(host) > 253 {
		return fmt.Errorf("host %q is longer than 253 characters", host)
	}
	for _, label := range strings.Split(host, ".") {
		if !hostnamePattern.MatchString(label) {
			return fmt.Errorf("host %q is neither an IP address nor a host name", host)
		}
	}
	return nil
}

// checkClientURL says what is wrong with an advertised client URL, or nil.
func checkClientURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("want an http:// or https:// URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("want an http:// or https:// URL")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("the URL has no host")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return errors.New("want scheme://host[:port] only, without user, path, query or fragment")
	}
	return nil
}

// checkClusterToken says what is wrong with a cluster token, or nil.
func checkClusterToken(token string) error {
	if token == "" {
		return errors.New("must not be empty")
	}
	if len(token) > maxClusterTokenLen {
		return fmt.Errorf("longer than %d bytes", maxClusterTokenLen)
	}
	for _, r := range token {
		if r <= ' ' || r > '~' {
			return errors.New("want printable ASCII without spaces")
		}
	}
	return nil
}

// flagCheck is one rule of validateFlags: the flag it is about, its value as
// given, and what is wrong (nil if nothing).
type flagCheck struct {
	flag  string
	value any
	err   error
}

// validateFlags checks the parsed flags and completes cfg from the ones
// that are not Config fields (--initial-cluster, --initial-cluster-state).
// The error names the first flag that is wrong, with its value.
func validateFlags(fs *flag.FlagSet, cfg *server.Config, initial, clusterState, logLevel string) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (every setting is a --flag)", fs.Args())
	}
	for _, c := range scalarChecks(cfg, logLevel) {
		if c.err != nil {
			return fmt.Errorf("--%s %v: %w", c.flag, c.value, c.err)
		}
	}
	switch clusterState {
	case "new":
	case "existing":
		cfg.Join = true
	default:
		return fmt.Errorf("--initial-cluster-state %q: want new or existing", clusterState)
	}
	members, err := initialCluster(cfg, initial)
	if err != nil {
		return err
	}
	cfg.InitialCluster = members
	return nil
}

// scalarChecks lists the rules on flags that stand alone or compare two
// values of cfg.
func scalarChecks(cfg *server.Config, logLevel string) []flagCheck {
	return []flagCheck{
		{"name", strconv.Quote(cfg.Name), checkMemberName(cfg.Name)},
		{"data-dir", strconv.Quote(cfg.DataDir), nonEmpty(cfg.DataDir)},
		{"listen-client", strconv.Quote(cfg.ClientAddr), checkHostPort(cfg.ClientAddr, true)},
		{"listen-peer", strconv.Quote(cfg.PeerAddr), checkHostPort(cfg.PeerAddr, true)},
		{"advertise-client", strconv.Quote(cfg.AdvertiseClientURL), orNil(cfg.AdvertiseClientURL != "", func() error { return checkClientURL(cfg.AdvertiseClientURL) })},
		{"cluster-token", strconv.Quote(cfg.ClusterToken), checkClusterToken(cfg.ClusterToken)},
		{"shards", cfg.Shards, inRange(cfg.Shards, 1, placement.MaxShards)},
		{"snapshot-count", cfg.SnapshotEvery, orNil(cfg.SnapshotEvery == 0, func() error { return errors.New("must be at least 1") })},
		{"snapshot-bytes", cfg.SnapshotBytes, orNil(cfg.SnapshotBytes == 0, func() error { return errors.New("must be at least 1") })},
		{"max-value-size", cfg.MaxValueSize, inRange(cfg.MaxValueSize, 1, server.MaxMaxValueSize)},
		{"tick", cfg.TickInterval, positive(cfg.TickInterval)},
		{"election-ticks", cfg.ElectionTicks, orNil(cfg.ElectionTicks <= heartbeatTicks, func() error {
			return fmt.Errorf("must be more than the heartbeat interval (%d tick): at least %d", heartbeatTicks, heartbeatTicks+1)
		})},
		{"request-timeout", cfg.RequestTimeout, positive(cfg.RequestTimeout)},
		{"min-session-timeout", cfg.MinSessionTTL, positive(cfg.MinSessionTTL)},
		{"max-session-timeout", cfg.MaxSessionTTL, orNil(cfg.MaxSessionTTL < cfg.MinSessionTTL, func() error {
			return fmt.Errorf("must not be below --min-session-timeout %v", cfg.MinSessionTTL)
		})},
		{"max-watches-per-session", cfg.MaxWatchesPerSession, inRange(cfg.MaxWatchesPerSession, 1, maxWatchesPerSessionLimit)},
		{"watch-queue-len", cfg.WatchQueueLen, inRange(cfg.WatchQueueLen, 1, watchQueueLenLimit)},
		{"max-pending-proposals", cfg.MaxPending, inRange(cfg.MaxPending, 1, maxPendingLimit)},
		{"log-level", strconv.Quote(logLevel), knownLevel(logLevel)},
	}
}

// initialCluster parses --initial-cluster (empty: this member alone at
// --listen-peer) and checks every entry and that it lists --name.
func initialCluster(cfg *server.Config, initial string) (map[string]string, error) {
	if initial == "" {
		if cfg.Join {
			return nil, errors.New("--initial-cluster-state existing needs --initial-cluster to list the running members and this one")
		}
		return map[string]string{cfg.Name: cfg.PeerAddr}, nil
	}
	members, err := server.ParseInitialCluster(initial)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster: %w", err)
	}
	byAddr := map[string]string{}
	for name, addr := range members {
		if err := checkMemberName(name); err != nil {
			return nil, fmt.Errorf("--initial-cluster: member name %q: %w", name, err)
		}
		if err := checkHostPort(addr, false); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %s=%s: %w", name, addr, err)
		}
		if other, dup := byAddr[addr]; dup {
			return nil, fmt.Errorf("--initial-cluster: %s and %s have the same peer address %s", min(name, other), max(name, other), addr)
		}
		byAddr[addr] = name
	}
	if _, ok := members[cfg.Name]; !ok {
		return nil, fmt.Errorf("--initial-cluster does not list this member (--name %q)", cfg.Name)
	}
	if cfg.Join && len(members) < 2 {
		return nil, errors.New("--initial-cluster-state existing needs --initial-cluster to list the running members too")
	}
	return members, nil
}

func nonEmpty(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func positive(d time.Duration) error {
	if d <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

func inRange(n, low, high int) error {
	if n < low || n > high {
		return fmt.Errorf("want %d to %d", low, high)
	}
	return nil
}

// orNil returns bad's error when cond holds, else nil.
func orNil(cond bool, bad func() error) error {
	if cond {
		return bad()
	}
	return nil
}

// logLevels are the names --log-level takes, exactly as written (slog's
// own parser would also take "INFO" or offsets such as "info+2").
var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

// knownLevel accepts the four level names --log-level documents.
func knownLevel(name string) error {
	if _, ok := logLevels[name]; !ok {
		return errors.New("want debug, info, warn or error")
	}
	return nil
}
