package process

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// TestFullDisk runs one member's data directory on a small tmpfs and fills
// it under a write load (values of 16 KiB, 256 KiB WAL segments, a snapshot
// every 5 entries), once with the member a follower and once the leader.
// The member must neither exit nor acknowledge what it cannot persist: its
// status says "disk full" naming the WAL and the snapshot store,
// latch_storage_full is 1, a write through it is refused at once with 503
// unavailable, and the other two keep serving writes (electing a leader of
// their own if it led). Once the filler is removed the member recovers by
// itself (status ok, metric 0), and every acknowledged write is on every
// member.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs for the member's data directory (CI runs as root)")
	}
	for _, role := range []string{"follower", "leader"} {
		t.Run(role, func(t *testing.T) { testFullDisk(t, role == "leader") })
	}
}

func testFullDisk(t *testing.T, leads bool) {
	c := proccluster.Start(t, proccluster.Options{
		Nodes: 3, SnapshotCount: 5,
		ExtraFlags: []string{"--unsafe-wal-segment-size", strconv.Itoa(256 << 10), "--max-value-size", strconv.Itoa(32 << 10)},
	})
	c.WaitLeader(60 * time.Second)
	const victim = 0
	mountDataDir(t, c, victim, "32m")
	leader := c.WaitLeader(60 * time.Second)
	if leads && leader != victim {
		transferLeadership(t, c, leader, victim)
	}
	victimURL := c.Members[victim].ClientURL
	others := []string{c.Members[1].ClientURL, c.Members[2].ClientURL}

	filler := fill(t, c.Members[victim].DataDir)
	l := startBigLoad(c.URLs())
	defer l.stop()
	status := waitStatus(t, victimURL, "storage full naming the WAL and the snapshot store", func(st api.Status) bool {
		return st.Storage == "disk full" && strings.Contains(st.StorageError, "wal") && strings.Contains(st.StorageError, "snapshot")
	})
	t.Logf("full (%s): %s: %s", status.Role, status.Storage, status.StorageError)
	if !c.Running(victim) {
		t.Fatalf("the member exited on a full disk: %v", c.ExitError(victim))
	}
	if got := metric(t, victimURL, "latch_storage_full"); got != "1" {
		t.Errorf("latch_storage_full = %q while full, want 1", got)
	}
	err := putValue(victimURL, "/full/through-victim", "x")
	if api.CodeOf(err) != api.CodeUnavailable || !strings.Contains(err.Error(), "storage full") {
		t.Errorf("a write through the full member: %v, want 503 unavailable saying storage full", err)
	}
	before := l.count()
	waitFor(t, 60*time.Second, "the majority to acknowledge 20 more writes", func() bool { return l.count() >= before+20 })
	for _, u := range others {
		if err := putValue(u, "/full/through-"+strings.TrimPrefix(u, "http://"), "y"); err != nil {
			t.Errorf("a write through %s while a member is full: %v", u, err)
		}
	}

	// The load stops first: what the member then writes while catching up
	// fits in the space freed, so it cannot fill up again.
	l.stop()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, victimURL, "storage ok again", func(st api.Status) bool { return st.Storage == "ok" && st.StorageError == "" })
	if got := metric(t, victimURL, "latch_storage_full"); got != "0" {
		t.Errorf("latch_storage_full = %q after space was freed, want 0", got)
	}
	if err := l.err(); err != nil {
		t.Fatal(err)
	}
	acked := l.snapshot()
	t.Logf("%d writes acknowledged (%d refused or failed)", len(acked), l.failed.Load())
	var newest uint64
	for _, w := range acked {
		newest = max(newest, w.index)
	}
	for i, m := range c.Members {
		for key, w := range acked {
			node, err := readStale(m.ClientURL, key, newest)
			if err != nil || node.Value != w.value {
				t.Fatalf("member %d: acknowledged %s (index %d) reads %q, %v after recovery", i, key, w.index, shorten(node.Value), err)
			}
		}
	}
}

// transferLeadership moves leadership from member from to member to and
// waits until to leads.
func transferLeadership(t *testing.T, c *proccluster.Cluster, from, to int) {
	t.Helper()
	body, _ := json.Marshal(api.LeaderTransferRequest{To: c.Members[to].Name})
	resp, err := diskClient.Post(c.Members[from].ClientURL+"/v1/cluster/leader", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("transfer leadership to %s: status %d: %s", c.Members[to].Name, resp.StatusCode, data)
	}
	waitStatus(t, c.Members[to].ClientURL, "the victim to lead", func(st api.Status) bool { return st.Role == "leader" })
}

// mountDataDir moves member i's data directory onto a tmpfs of size (the
// member is stopped meanwhile) and restarts it there; the tmpfs is
// unmounted (lazily: the member may still run) at the end of the test.
func mountDataDir(t *testing.T, c *proccluster.Cluster, i int, size string) {
	t.Helper()
	dir := c.Members[i].DataDir
	c.Kill(i)
	saved := dir + ".saved"
	if err := os.Rename(dir, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	if err := copyTree(saved, dir); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(i); err != nil {
		t.Fatal(err)
	}
}

func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		target := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
}

// fill writes a file into dir until the filesystem is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for written := 0; ; written += len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			t.Logf("filled %s with %d KiB", dir, written>>10)
			return path
		}
		if written > 1<<30 {
			t.Fatalf("wrote 1 GiB to %s and it is not full", dir)
		}
	}
}

// bigLoad puts 16 KiB values to fresh keys through random members.
type bigLoad struct {
	urls    []string
	stopped chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu     sync.Mutex
	acked  map[string]ackedWrite
	failed atomic.Int64
}

type ackedWrite struct {
	value string
	index uint64
}

func startBigLoad(urls []string) *bigLoad {
	l := &bigLoad{urls: urls, stopped: make(chan struct{}), acked: map[string]ackedWrite{}}
	for w := range 2 {
		l.wg.Add(1)
		go l.write(w)
	}
	return l
}

func (l *bigLoad) write(writer int) {
	defer l.wg.Done()
	random := rand.New(rand.NewPCG(uint64(writer), 18))
	for i := 0; ; i++ {
		select {
		case <-l.stopped:
			return
		default:
		}
		key := fmt.Sprintf("/full/w%d/k%d", writer, i)
		value := fmt.Sprintf("%s-%s", key, strings.Repeat("v", 16<<10))
		index, err := putIndex(l.urls[random.IntN(len(l.urls))], key, value)
		if err != nil {
			l.failed.Add(1)
			time.Sleep(20 * time.Millisecond) // a member may be down or full: do not spin
			continue
		}
		l.mu.Lock()
		l.acked[key] = ackedWrite{value: value, index: index}
		l.mu.Unlock()
	}
}

func (l *bigLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *bigLoad) snapshot() map[string]ackedWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ackedWrite, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

func (l *bigLoad) stop() {
	l.once.Do(func() { close(l.stopped) })
	l.wg.Wait()
}

func (l *bigLoad) err() error {
	if l.count() == 0 {
		return errors.New("no write was acknowledged")
	}
	return nil
}

var diskClient = &http.Client{Timeout: 10 * time.Second}

// putIndex writes value at key through base and returns the write's index.
func putIndex(base, key, value string) (uint64, error) {
	body, _ := json.Marshal(api.PutRequest{Value: value})
	req, err := http.NewRequest(http.MethodPut, base+"/v1/kv"+key, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := diskClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			return 0, &e.Error
		}
		return 0, fmt.Errorf("put %s: status %d: %s", key, resp.StatusCode, data)
	}
	var node api.Node
	if err := json.Unmarshal(data, &node); err != nil {
		return 0, err
	}
	return node.ModifiedIndex, nil
}

func putValue(base, key, value string) error {
	_, err := putIndex(base, key, value)
	return err
}

// waitStatus polls base's /v1/status until cond holds (60 s at most).
func waitStatus(t *testing.T, base, what string, cond func(api.Status) bool) api.Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last api.Status
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = statusOf(base)
		if lastErr == nil && cond(last) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within 60s: last status %+v, %v", what, last, lastErr)
	return last
}

func statusOf(base string) (api.Status, error) {
	resp, err := diskClient.Get(base + "/v1/status")
	if err != nil {
		return api.Status{}, err
	}
	defer resp.Body.Close()
	var st api.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// metric returns the value of the unlabelled series name on base's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := diskClient.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, name+" "); ok {
			return value
		}
	}
	return ""
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// readStale reads key on base once it applied minIndex, from its own state.
func readStale(base, key string, minIndex uint64) (api.Node, error) {
	query := url.Values{"consistency": {api.Stale}, "min_index": {strconv.FormatUint(minIndex, 10)}}
	resp, err := diskClient.Get(base + "/v1/kv" + key + "?" + query.Encode())
	if err != nil {
		return api.Node{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return api.Node{}, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	var node api.Node
	err = json.NewDecoder(resp.Body).Decode(&node)
	return node, err
}
