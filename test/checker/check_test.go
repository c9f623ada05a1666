package checker

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

// checkProcess is one latchctl check process.
type checkProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer // read only after wait
	exited         chan error
}

// startCheck starts 'latchctl --endpoints URLS check ARGS...'.
func startCheck(t *testing.T, urls []string, args ...string) *checkProcess {
	t.Helper()
	latchctl := proccluster.BuildLatchctl(t)
	p := &checkProcess{exited: make(chan error, 1)}
	p.cmd = exec.Command(latchctl, append([]string{"--endpoints", strings.Join(urls, ","), "check"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start latchctl check: %v", err)
	}
	t.Logf("latchctl check %s: pid %d", strings.Join(args, " "), p.cmd.Process.Pid)
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill() // its own PID only
			<-p.exited
		}
	})
	return p
}

// wait waits for the process to exit, at most timeout, and returns its exit code.
func (p *checkProcess) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		p.exited <- nil // for the cleanup
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
		t.Fatalf("latchctl check did not exit within %v\nstdout:\n%s\nstderr:\n%s", timeout, &p.stdout, &p.stderr)
	}
	t.Logf("latchctl check exited %d\nstdout:\n%s\nstderr (last lines):\n%s", p.cmd.ProcessState.ExitCode(), &p.stdout, tail(p.stderr.String(), 15))
	return p.cmd.ProcessState.ExitCode()
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func startCluster(t *testing.T, opts proccluster.Options) *proccluster.Cluster {
	t.Helper()
	c := proccluster.Start(t, opts)
	c.WaitLeader(60 * time.Second)
	return c
}

// get reads path linearizably from base and returns the HTTP status and node.
func get(t *testing.T, base, path string) (int, api.Node) {
	t.Helper()
	resp, err := http.Get(base + "/v1/kv" + path)
	if err != nil {
		t.Fatalf("get %s on %s: %v", path, base, err)
	}
	defer resp.Body.Close()
	var node api.Node
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&node); err != nil {
			t.Fatalf("get %s: %v", path, err)
		}
	}
	return resp.StatusCode, node
}

func put(t *testing.T, base, path, value string) {
	t.Helper()
	body, _ := json.Marshal(api.PutRequest{Value: value})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/kv"+path, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("put %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put %s: status %d", path, resp.StatusCode)
	}
}

// appliedIndex is the highest applied index any member reports.
func appliedIndex(c *proccluster.Cluster) uint64 {
	var most uint64
	for i := range c.Members {
		if st, err := c.Status(i); err == nil {
			most = max(most, st.AppliedIndex)
		}
	}
	return most
}

// waitApplied waits until some member applied at least index.
func waitApplied(t *testing.T, c *proccluster.Cluster, index uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for appliedIndex(c) < index {
		if time.Now().After(deadline) {
			t.Fatalf("no member applied index %d within %v (highest %d)", index, timeout, appliedIndex(c))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seedArg is the checks' seed, printed.
func seedArg(t *testing.T) string {
	return strconv.FormatUint(testseed.Pick(t, *seedFlag, "LATCH_TEST_SEED"), 10)
}

// TestCheckPassesOnHealthyCluster: every workload against a healthy
// 3-member cluster finds nothing, exits 0 with the summary line, and leaves
// no key under its prefix (a key outside it is untouched).
func TestCheckPassesOnHealthyCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	c := startCluster(t, proccluster.Options{Nodes: 3})
	urls := c.URLs()
	put(t, urls[0], "/keep", "mine")
	p := startCheck(t, urls, "--prefix", "/check", "--duration", "6s", "--seed", seedArg(t), "--out", t.TempDir())
	if code := p.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit code %d on a healthy cluster, want 0", code)
	}
	out := p.stdout.String()
	for _, want := range []string{"all linearizable (0 Unknown)", "0 acknowledged writes lost of", "0 stale-token writes accepted", "0 ephemeral nodes leaked, 0 deleted early"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q: %s", want, out)
		}
	}
	if strings.Contains(out, " 0 operations checked") {
		t.Errorf("nothing was checked: %s", out)
	}
	for _, u := range urls {
		// The check's keys, and its lock's queue: nothing existed before.
		for _, path := range []string{"/check", "/locks/latchctl-check_check", "/locks"} {
			if status, node := get(t, u, path); status != http.StatusNotFound {
				t.Errorf("%s: %s after the check: status %d (%+v), want 404: it cleans up", u, path, status, node)
			}
		}
	}
	if status, node := get(t, urls[1], "/keep"); status != http.StatusOK || node.Value != "mine" {
		t.Errorf("/keep after the check: status %d value %q, want it untouched", status, node.Value)
	}
}

// TestCheckCatchesPlantedBugs runs the check against clusters started with
// latchd's planted bugs (the fault suite's --unsafe- flags) while the test
// injects the faults a user would: each must exit 1 naming the anomaly.
func TestCheckCatchesPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	tests := []struct {
		name      string
		opts      proccluster.Options
		workloads string
		fault     func(t *testing.T, c *proccluster.Cluster)
		expect    string // an anomaly line must start with it
	}{
		{
			// (b) a follower serves "linearizable" reads from its own
			// state: restarted members catch up while serving reads.
			name:      "b-local-linearizable-reads",
			opts:      proccluster.Options{Nodes: 3, ExtraFlags: []string{"--unsafe-local-reads"}},
			workloads: "register",
			fault:     restartFollowers,
			expect:    "anomaly: L: history not linearizable",
		},
		{
			// (a) writes acknowledged before any fsync die with a power
			// cut of the whole cluster.
			name:      "a-acknowledged-before-fsync",
			opts:      proccluster.Options{Nodes: 3, ExtraFlags: []string{"--unsafe-no-sync"}, SyncJournal: true},
			workloads: "set",
			fault:     powerCut,
			expect:    "anomaly: D: acknowledged",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCluster(t, tt.opts)
			out := t.TempDir()
			start := appliedIndex(c)
			p := startCheck(t, c.URLs(), "--prefix", "/check", "--duration", "12s", "--seed", seedArg(t),
				"--workloads", tt.workloads, "--out", out)
			waitApplied(t, c, start+100, time.Minute) // the workload is writing
			tt.fault(t, c)
			if code := p.wait(t, 5*time.Minute); code != 1 {
				t.Fatalf("exit code %d, want 1 (anomalies)", code)
			}
			if !strings.Contains(p.stdout.String(), "SAFETY ANOMALIES") {
				t.Errorf("summary does not say SAFETY ANOMALIES")
			}
			if !hasLine(p.stdout.String(), tt.expect) {
				t.Fatalf("planted bug not caught: no line %q", tt.expect)
			}
			if tt.workloads == "register" {
				html, _ := filepath.Glob(filepath.Join(out, "*.html"))
				if len(html) != 1 {
					t.Errorf("visualizations in --out: %v, want one", html)
				}
			}
		})
	}
}

func hasLine(out, prefix string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// restartFollowers kills each follower in turn with SIGKILL and restarts it
// once the others applied 50 more entries without it.
func restartFollowers(t *testing.T, c *proccluster.Cluster) {
	t.Helper()
	leader := c.WaitLeader(30 * time.Second)
	for i := range c.Members {
		if i == leader {
			continue
		}
		c.Kill(i)
		waitApplied(t, c, appliedIndex(c)+50, time.Minute)
		if err := c.Restart(i); err != nil {
			t.Fatalf("restart %s: %v", c.Members[i].Name, err)
		}
		waitApplied(t, c, appliedIndex(c)+50, time.Minute)
	}
}

// powerCut crashes every member at once, losing what it had not fsynced,
// and restarts them.
func powerCut(t *testing.T, c *proccluster.Cluster) {
	t.Helper()
	for i := range c.Members {
		c.Kill(i)
	}
	for i := range c.Members {
		cut, err := c.CrashLosingUnsynced(i, uint64(i))
		if err != nil {
			t.Fatalf("crash %s: %v", c.Members[i].Name, err)
		}
		t.Logf("%s: the power cut %s; files cut %+v, removed %v", c.Members[i].Name, cut, cut.Files, cut.Removed)
	}
	for i := range c.Members {
		if err := c.Restart(i); err != nil {
			t.Fatalf("restart %s: %v", c.Members[i].Name, err)
		}
	}
	c.WaitLeader(60 * time.Second)
}

// TestCheckRefusesPrefix: a prefix that is "/", relative or reserved is a
// usage error before anything is sent.
func TestCheckRefusesPrefix(t *testing.T) {
	for _, prefix := range []string{"/", "check", "/locks/x", "/check/"} {
		p := startCheck(t, []string{"http://127.0.0.1:1"}, "--prefix", prefix, "--duration", "1s")
		if code := p.wait(t, time.Minute); code != 1 {
			t.Errorf("--prefix %q: exit code %d, want 1", prefix, code)
		}
		if !strings.Contains(p.stderr.String(), "--prefix") {
			t.Errorf("--prefix %q: stderr does not name the flag: %s", prefix, &p.stderr)
		}
	}
}

// TestCheckCleansUpOnInterrupt: SIGINT in the middle of a run stops the
// workloads, removes everything under the prefix and exits 1 with no verdict.
func TestCheckCleansUpOnInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	c := startCluster(t, proccluster.Options{Nodes: 3})
	urls := c.URLs()
	start := appliedIndex(c)
	p := startCheck(t, urls, "--prefix", "/check/nested", "--duration", "10m", "--seed", seedArg(t))
	waitApplied(t, c, start+200, time.Minute)
	if status, _ := get(t, urls[0], "/check/nested"); status != http.StatusOK {
		t.Fatalf("/check/nested while the check runs: status %d, want 200", status)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 2*time.Minute); code != 1 {
		t.Fatalf("exit code %d after SIGINT, want 1", code)
	}
	if !strings.Contains(p.stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted")
	}
	for _, u := range urls {
		for _, path := range []string{"/check/nested", "/check"} { // the check's writes created both
			if status, node := get(t, u, path); status != http.StatusNotFound {
				t.Errorf("%s: %s after SIGINT: status %d (%+v), want 404", u, path, status, node)
			}
		}
	}
}
