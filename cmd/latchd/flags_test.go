package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/httpapi"
	"github.com/latch-io/latch/internal/vfs"
)

// TestParseFlagsRejectsBadValues checks that every out-of-range or malformed
// flag is refused before the server starts, with an error naming the flag.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // the whole error
	}{
		{"negative tick", []string{"--tick", "-1s"}, "--tick -1s: must be positive"},
		{"zero tick", []string{"--tick", "0s"}, "--tick 0s: must be positive"},
		{"zero election ticks", []string{"--election-ticks", "0"}, "--election-ticks 0: must be more than the heartbeat interval (1 tick): at least 2"},
		{"election ticks equal to the heartbeat", []string{"--election-ticks", "1"}, "--election-ticks 1: must be more than the heartbeat interval (1 tick): at least 2"},
		{"negative request timeout", []string{"--request-timeout", "-5s"}, "--request-timeout -5s: must be positive"},
		{"zero min session timeout", []string{"--min-session-timeout", "0s"}, "--min-session-timeout 0s: must be positive"},
		{"min above max session timeout", []string{"--min-session-timeout", "30s", "--max-session-timeout", "10s"}, "--max-session-timeout 10s: must not be below --min-session-timeout 30s"},
		{"zero snapshot count", []string{"--snapshot-count", "0"}, "--snapshot-count 0: must be at least 1"},
		{"zero snapshot bytes", []string{"--snapshot-bytes", "0"}, "--snapshot-bytes 0: must be at least 1"},
		{"zero max value size", []string{"--max-value-size", "0"}, "--max-value-size 0: want 1 to 1048576"},
		{"max value size over 1 MiB", []string{"--max-value-size", "1048577"}, "--max-value-size 1048577: want 1 to 1048576"},
		{"negative watches", []string{"--max-watches-per-session", "-1"}, "--max-watches-per-session -1: want 1 to 1048576"},
		{"zero watch queue", []string{"--watch-queue-len", "0"}, "--watch-queue-len 0: want 1 to 1048576"},
		{"huge watch queue", []string{"--watch-queue-len", "99999999999"}, "--watch-queue-len 99999999999: want 1 to 1048576"},
		{"zero pending proposals", []string{"--max-pending-proposals", "0"}, "--max-pending-proposals 0: want 1 to 16777216"},
		{"empty name", []string{"--name", ""}, `--name "": must not be empty`},
		{"name with a comma", []string{"--name", "a,b"}, `--name "a,b": want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{"empty data dir", []string{"--data-dir", ""}, `--data-dir "": must not be empty`},
		{"client address without port", []string{"--listen-client", "127.0.0.1"}, `--listen-client "127.0.0.1": want host:port: address 127.0.0.1: missing port in address`},
		{"client port out of range", []string{"--listen-client", "127.0.0.1:70000"}, `--listen-client "127.0.0.1:70000": port "70000": want a number from 1 to 65535`},
		{"peer port zero", []string{"--listen-peer", "127.0.0.1:0"}, `--listen-peer "127.0.0.1:0": port "0": want a number from 1 to 65535`},
		{"peer host malformed", []string{"--listen-peer", "bad host:2380"}, `--listen-peer "bad host:2380": host "bad host" is neither an IP address nor a host name`},
		{"zk address without port", []string{"--listen-zk", "127.0.0.1"}, `--listen-zk "127.0.0.1": want host:port: address 127.0.0.1: missing port in address`},
		{"unknown four-letter word", []string{"--zk-4lw-whitelist", "ruok,dump"}, `--zk-4lw-whitelist "ruok,dump": unknown four-letter word "dump": want some of conf,isro,mntr,ruok,srvr,stat, or *`},
		{"negative ZooKeeper per-host cap", []string{"--zk-max-client-cnxns", "-1"}, "--zk-max-client-cnxns -1: want 0 (no cap) or more"},
		{"advertised URL without scheme", []string{"--advertise-client", "10.0.0.1:2379"}, `--advertise-client "10.0.0.1:2379": want an http:// or https:// URL: parse "10.0.0.1:2379": first path segment in URL cannot contain colon`},
		{"advertised host:port", []string{"--advertise-client", "n1:2379"}, `--advertise-client "n1:2379": want an http:// or https:// URL`},
		{"advertised URL of another scheme", []string{"--advertise-client", "ftp://10.0.0.1:2379"}, `--advertise-client "ftp://10.0.0.1:2379": want an http:// or https:// URL`},
		{"advertised URL with a path", []string{"--advertise-client", "http://10.0.0.1:2379/v1"}, `--advertise-client "http://10.0.0.1:2379/v1": want scheme://host[:port] only, without user, path, query or fragment`},
		{"empty cluster token", []string{"--cluster-token", ""}, `--cluster-token "": must not be empty`},
		{"cluster token with a space", []string{"--cluster-token", "my cluster"}, `--cluster-token "my cluster": want printable ASCII without spaces`},
		{"unknown log level", []string{"--log-level", "info+2"}, `--log-level "info+2": want debug, info, warn or error`},
		{"log level in capitals", []string{"--log-level", "INFO"}, `--log-level "INFO": want debug, info, warn or error`},
		{"unknown cluster state", []string{"--initial-cluster-state", "old"}, `--initial-cluster-state "old": want new or existing`},
		{"initial cluster entry without address", []string{"--name", "n1", "--initial-cluster", "n1"}, `--initial-cluster: initial cluster entry "n1" is not name=host:port`},
		{"initial cluster without this member", []string{"--name", "n4", "--initial-cluster", "n1=10.0.0.1:2380,n2=10.0.0.2:2380"}, `--initial-cluster does not list this member (--name "n4")`},
		{"initial cluster with a bad port", []string{"--name", "n1", "--initial-cluster", "n1=10.0.0.1:99999"}, `--initial-cluster: n1=10.0.0.1:99999: port "99999": want a number from 1 to 65535`},
		{"initial cluster without a host", []string{"--name", "n1", "--initial-cluster", "n1=:2380"}, `--initial-cluster: n1=:2380: want host:port with a host that peers can reach`},
		{"client port on every interface in clear", []string{"--listen-client", "0.0.0.0:2379"},
			`--listen-client "0.0.0.0:2379" is not a loopback address and the client port has no TLS (--cert-file, --key-file): refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it`},
		{"client port on a host name in clear", []string{"--listen-client", "n1:2379"},
			`--listen-client "n1:2379" is not a loopback address and the client port has no TLS (--cert-file, --key-file): refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it`},
		{"peer port on a LAN address in clear", []string{"--listen-peer", "10.0.0.1:2380"},
			`--listen-peer "10.0.0.1:2380" is not a loopback address and the peer port has no TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file): refusing to replicate in clear text; give certificates, or --insecure-listen to allow it`},
		{"ZooKeeper port off loopback in clear", []string{"--listen-zk", "0.0.0.0:2181"},
			`--listen-zk "0.0.0.0:2181" is not a loopback address and the client port has no TLS (--cert-file, --key-file): refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it`},
		{"TLS 1.1", []string{"--tls-min-version", "1.1"}, `--tls-min-version "1.1": TLS 1.1 is refused: it is deprecated (RFC 8996); want 1.2 or 1.3`},
		{"unknown TLS version", []string{"--tls-min-version", "tls13"}, `--tls-min-version "tls13": want 1.2 or 1.3`},
		{"certificate without key", []string{"--cert-file", "c.pem"}, "--cert-file and --key-file go together: give both or neither"},
		{"peer key without certificate", []string{"--peer-key-file", "k.pem"}, "--peer-cert-file and --peer-key-file go together: give both or neither"},
		{"client CA without certificate", []string{"--trusted-ca-file", "ca.pem"}, "--trusted-ca-file needs --cert-file and --key-file"},
		{"client cert auth without TLS", []string{"--client-cert-auth"}, "--client-cert-auth needs --cert-file and --key-file (client certificates are checked in the TLS handshake)"},
		{"client cert auth without CA", []string{"--cert-file", "c.pem", "--key-file", "k.pem", "--client-cert-auth"},
			"--client-cert-auth needs --trusted-ca-file (the CA client certificates must chain to)"},
		{"peer TLS without the peer CA", []string{"--peer-cert-file", "c.pem", "--peer-key-file", "k.pem"},
			"--peer-trusted-ca-file is required with --peer-cert-file: members verify each other's certificates against it"},
		{"TLS client port advertised as http", []string{"--cert-file", "c.pem", "--key-file", "k.pem", "--advertise-client", "http://127.0.0.1:2379"},
			`--advertise-client "http://127.0.0.1:2379": the client port serves TLS (--cert-file), so want an https:// URL`},
		{"initial cluster with a bad name", []string{"--name", "n1", "--initial-cluster", "n1=10.0.0.1:2380,n 2=10.0.0.2:2380"}, `--initial-cluster: member name "n 2": want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{"initial cluster sharing an address", []string{"--name", "n1", "--initial-cluster", "n1=10.0.0.1:2380,n2=10.0.0.1:2380"}, `--initial-cluster: n1 and n2 have the same peer address 10.0.0.1:2380`},
		{"joining without the running members", []string{"--initial-cluster-state", "existing"}, `--initial-cluster-state existing needs --initial-cluster to list the running members and this one`},
		{"joining a cluster of only this member", []string{"--name", "n4", "--initial-cluster-state", "existing", "--initial-cluster", "n4=10.0.0.4:2380"}, `--initial-cluster-state existing needs --initial-cluster to list the running members too`},
		{"positional argument", []string{"--name", "n1", "extra"}, `unexpected arguments ["extra"] (every setting is a --flag)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := parseFlags(tt.args, new(httpapi.DefaultLimits()), new(securityFlags), new(zkOptions))
			var usage usageError
			if !errors.As(err, &usage) || err.Error() != tt.want {
				t.Fatalf("parseFlags(%q) = %v\nwant usage error %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestParseFlagsAcceptsValidSettings checks that the flag sets the README,
// docker-compose.yml and the process-level test harnesses use still parse.
func TestParseFlagsAcceptsValidSettings(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no flags", nil},
		{"README three-node member", []string{"--name", "n1", "--data-dir", "/tmp/latch-n1", "--listen-client", "127.0.0.1:7001",
			"--listen-peer", "127.0.0.1:7101", "--initial-cluster", "n1=127.0.0.1:7101,n2=127.0.0.1:7102,n3=127.0.0.1:7103"}},
		{"compose joiner", []string{"--name", "o1", "--data-dir", "/data", "--listen-client", "o1:2379", "--listen-peer", "o1:2380",
			"--initial-cluster-state", "existing", "--cluster-token", "latch-compose", "--initial-cluster", "n1=n1:2380,n2=n2:2380,n3=n3:2380,o1=o1:2380", "--insecure-listen"}},
		{"every interface, IPv6 and URL prefixes", []string{"--name", "a.b_c-1", "--listen-client", ":2379", "--listen-peer", "[::1]:2380",
			"--advertise-client", "https://latch.example.com:2379", "--initial-cluster", "a.b_c-1=http://[::1]:2380,z=tcp://db-2.example.com:2380", "--insecure-listen"}},
		{"ZooKeeper listener", []string{"--listen-zk", "127.0.0.1:2181", "--zk-4lw-whitelist", "ruok, srvr,mntr"}},
		{"every four-letter word", []string{"--listen-zk", ":2181", "--zk-4lw-whitelist", "*", "--insecure-listen"}},
		{"ZooKeeper per-host cap", []string{"--listen-zk", "127.0.0.1:2181", "--zk-max-client-cnxns", "60", "--max-connections", "10000"}},
		{"fast test timing", []string{"--tick", "10ms", "--election-ticks", "2", "--min-session-timeout", "1s", "--max-session-timeout", "1s",
			"--snapshot-count", "1", "--snapshot-bytes", "4096", "--max-value-size", "1048576", "--log-level", "warn"}},
		{"TLS on both ports, on a LAN", []string{"--name", "n1", "--listen-client", "10.0.0.1:2379", "--listen-peer", "10.0.0.1:2380",
			"--initial-cluster", "n1=10.0.0.1:2380", "--cert-file", "c.pem", "--key-file", "k.pem", "--trusted-ca-file", "ca.pem",
			"--client-cert-auth", "--peer-cert-file", "p.pem", "--peer-key-file", "pk.pem", "--peer-trusted-ca-file", "pca.pem", "--tls-min-version", "1.3"}},
		{"clear text on a LAN, explicitly", []string{"--listen-client", "10.0.0.1:2379", "--listen-peer", "10.0.0.1:2380", "--insecure-listen"}},
		{"localhost in clear", []string{"--listen-client", "localhost:2379", "--listen-peer", "[::1]:2380"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, _, err := parseFlags(tt.args, new(httpapi.DefaultLimits()), new(securityFlags), new(zkOptions))
			if err != nil {
				t.Fatalf("parseFlags(%q) = %v", tt.args, err)
			}
			if _, ok := cfg.InitialCluster[cfg.Name]; !ok {
				t.Fatalf("initial cluster %v lacks %q", cfg.InitialCluster, cfg.Name)
			}
		})
	}
}

// TestCommandLineErrors runs the latchd binary: a bad flag is one line on
// stderr (not repeated around the usage text) and exit 2; --help prints the
// usage on stdout and exits 0; --version prints the build and exits 0.
func TestCommandLineErrors(t *testing.T) {
	bin := buildLatchd(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // prefix of stdout
		stderr string // the whole of stderr
	}{
		{"negative tick", []string{"--tick", "-1s"}, exitUsage, "", "latchd: --tick -1s: must be positive\nrun 'latchd --help' for usage\n"},
		{"zero election ticks", []string{"--election-ticks", "0"}, exitUsage, "",
			"latchd: --election-ticks 0: must be more than the heartbeat interval (1 tick): at least 2\nrun 'latchd --help' for usage\n"},
		{"unknown flag", []string{"--bogus"}, exitUsage, "", "latchd: flag provided but not defined: -bogus\nrun 'latchd --help' for usage\n"},
		{"unparsable value", []string{"--tick", "soon"}, exitUsage, "",
			"latchd: invalid value \"soon\" for flag -tick: parse error\nrun 'latchd --help' for usage\n"},
		{"clear text on every interface", []string{"--listen-client", ":2379"}, exitUsage, "",
			"latchd: --listen-client \":2379\" is not a loopback address and the client port has no TLS (--cert-file, --key-file): " +
				"refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it\nrun 'latchd --help' for usage\n"},
		{"unreadable certificate", []string{"--cert-file", "absent.crt", "--key-file", "absent.key"}, exitFailure, "",
			"latchd: client TLS: tlsconfig: stat absent.crt: no such file or directory\n"},
		{"help", []string{"--help"}, 0, "Usage of latchd:\n", ""},
		{"version", []string{"--version"}, 0, "latchd ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, tt.args...)
			cmd.Dir = t.TempDir() // a server that starts by mistake keeps its data here
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := exitCodeOf(t, cmd)
			if code != tt.code || !strings.HasPrefix(stdout.String(), tt.stdout) || stderr.String() != tt.stderr {
				t.Fatalf("latchd %q: exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q..., stderr %q",
					tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestVersion checks the --version line: program, module version, revision
// and the Go release that built it.
func TestVersion(t *testing.T) {
	out, err := exec.Command(buildLatchd(t), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(string(out), "\n")
	if !strings.HasPrefix(line, "latchd ") || !strings.Contains(line, " (revision ") ||
		!strings.HasSuffix(line, ") "+runtime.Version()) || strings.Contains(line, "\n") {
		t.Fatalf("--version printed %q, want one line 'latchd VERSION (revision REV...) %s'", out, runtime.Version())
	}
}

// exitCodeOf runs cmd (bounded by a deadline) and returns its exit code.
func exitCodeOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit", cmd.Args)
		return 0
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// buildLatchd compiles this package once per test binary.
func buildLatchd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "latchd-flags-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", buildDir, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build latchd: %v", buildErr)
	}
	return filepath.Join(buildDir, "latchd")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func TestWALFlushFlag(t *testing.T) {
	for args, want := range map[string]vfs.FlushMethod{"": vfs.FlushAuto, "--wal-flush=auto": vfs.FlushAuto, "--wal-flush=fsync": vfs.FlushSyscall} {
		cfg, _, _, err := parseFlags(strings.Fields(args), new(httpapi.DefaultLimits()), new(securityFlags), new(zkOptions))
		if err != nil || cfg.FlushMethod != want {
			t.Errorf("parseFlags(%q): flush %v, %v; want %v", args, cfg.FlushMethod, err, want)
		}
	}
	_, _, _, err := parseFlags([]string{"--wal-flush", "fdatasync"}, new(httpapi.DefaultLimits()), new(securityFlags), new(zkOptions))
	if err == nil || !strings.Contains(err.Error(), `"fdatasync" is neither auto nor fsync`) {
		t.Fatalf("--wal-flush fdatasync: %v, want a usage error", err)
	}
}
