package backup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/cli"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// latchctl runs the CLI in process and returns its exit code, stdout and stderr.
func latchctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	stdio := cli.IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := cli.Run(context.Background(), args, stdio)
	return code, stdout.String(), stderr.String()
}

// status is the part of 'latchctl snapshot status -o json' the tests read.
type status struct {
	Index  uint64 `json:"index"`
	Shards []struct {
		Nodes    uint64 `json:"nodes"`
		Sessions uint64 `json:"sessions"`
	} `json:"shards"`
}

func snapshotStatus(t *testing.T, file string) status {
	t.Helper()
	code, out, errOut := latchctl(t, "snapshot", "status", file, "-o", "json")
	if code != 0 {
		t.Fatalf("snapshot status %s: exit %d: %s", file, code, errOut)
	}
	var s status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("snapshot status output %q: %v", out, err)
	}
	return s
}

func newClient(t *testing.T, c *proccluster.Cluster) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Endpoints: c.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// history records what the old cluster acknowledged.
type history struct {
	mu       sync.Mutex
	acked    map[string]uint64 // path (= value) -> index of its acknowledged write
	maxToken uint64
	maxSeq   string
}

func (h *history) ack(path string, index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acked[path] = index
}

func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// writeLoad writes unique keys until ctx ends, recording each acknowledged one.
func writeLoad(ctx context.Context, cl *client.Client, h *history, writer int) {
	for n := 0; ctx.Err() == nil; n++ {
		path := fmt.Sprintf("/load/w%d-%06d", writer, n)
		node, err := cl.Put(ctx, path, path)
		if err == nil {
			h.ack(path, node.ModifiedIndex)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// issueTokensAndNames acquires and releases a lock and makes sequential
// nodes, recording the highest token and name.
func issueTokensAndNames(t *testing.T, ctx context.Context, s *client.Session, cl *client.Client, h *history, rounds int) {
	t.Helper()
	for range rounds {
		lock, err := s.AcquireLock(ctx, "backup-lock", 5*time.Second)
		if err != nil || !lock.Held {
			t.Fatalf("acquire lock: %+v, %v", lock, err)
		}
		if _, err := s.ReleaseLock(ctx, "backup-lock", lock.FencingToken); err != nil {
			t.Fatalf("release lock: %v", err)
		}
		node, err := cl.Put(ctx, "/seq/item-", "x", client.Sequential())
		if err != nil {
			t.Fatalf("sequential put: %v", err)
		}
		h.mu.Lock()
		h.maxToken = max(h.maxToken, lock.FencingToken)
		h.maxSeq = max(h.maxSeq, node.Path)
		h.mu.Unlock()
	}
}

func TestSaveUnderLoadAndRestore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "backup.latch")
	old := proccluster.Start(t, proccluster.Options{SnapshotCount: 200, ExtraFlags: []string{"--cluster-token", "old-cluster"}})
	old.WaitLeader(30 * time.Second)
	cl := newClient(t, old)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := &history{acked: map[string]uint64{}}

	owner, err := cl.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/eph/owned", "mine", client.Ephemeral(), client.WithSession(owner)); err != nil {
		t.Fatal(err)
	}
	issueTokensAndNames(t, ctx, owner, cl, h, 3)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for w := range 2 {
		writers.Add(1)
		go func() { defer writers.Done(); writeLoad(loadCtx, cl, h, w) }()
	}
	defer func() { stopLoad(); writers.Wait() }()
	waitFor(t, time.Minute, "300 acknowledged writes before the save", func() bool { return h.count() >= 300 })

	// From a follower: its linearizable barrier goes through the leader.
	endpoint := old.Members[(old.WaitLeader(30*time.Second)+1)%len(old.Members)].ClientURL
	if code, _, errOut := latchctl(t, "--endpoints", endpoint, "snapshot", "save", file); code != 0 {
		t.Fatalf("snapshot save: exit %d: %s", code, errOut)
	}
	savedAfter := h.count()
	// The old cluster goes on: writes, tokens and names the backup lacks.
	waitFor(t, time.Minute, "300 more acknowledged writes after the save", func() bool { return h.count() >= savedAfter+300 })
	issueTokensAndNames(t, ctx, owner, cl, h, 3)
	stopLoad()
	writers.Wait()

	saved := snapshotStatus(t, file)
	if saved.Index == 0 || len(saved.Shards) != 1 || saved.Shards[0].Sessions == 0 {
		t.Fatalf("backup status %+v: want one shard with an index and the live session", saved)
	}
	for i := range old.Members {
		old.Kill(i)
	}
	t.Logf("backup at index %d; %d writes acknowledged in all; highest token %d, sequential name %s",
		saved.Index, h.count(), h.maxToken, h.maxSeq)

	restored := proccluster.Start(t, proccluster.Options{
		RestoreFrom: file, RestoreFlags: []string{"--cluster-token", "new-cluster"},
		ExtraFlags: []string{"--cluster-token", "new-cluster"},
	})
	restored.WaitLeader(30 * time.Second)
	rcl := newClient(t, restored)
	checkWrites(t, ctx, rcl, h, saved.Index)
	checkSessionsGone(t, ctx, rcl, owner.ID())
	checkAboveOld(t, ctx, rcl, h)
}

// checkWrites: every write acknowledged at or below index is there; none above.
func checkWrites(t *testing.T, ctx context.Context, cl *client.Client, h *history, index uint64) {
	t.Helper()
	below := 0
	for path, at := range h.acked {
		node, err := cl.Get(ctx, path)
		switch {
		case at <= index && err != nil:
			t.Errorf("write of %s acknowledged at %d <= backup index %d: %v", path, at, index, err)
		case at <= index && node.Value != path:
			t.Errorf("%s holds %q, want %q", path, node.Value, path)
		case at > index && api.CodeOf(err) != api.CodeNotFound:
			t.Errorf("write of %s at %d > backup index %d: got %+v, %v; want not found", path, at, index, node, err)
		}
		if at <= index {
			below++
		}
	}
	if below == 0 || below == len(h.acked) {
		t.Errorf("%d of %d writes at or below the backup index: the save did not run under load", below, len(h.acked))
	}
}

func checkSessionsGone(t *testing.T, ctx context.Context, cl *client.Client, oldSession string) {
	t.Helper()
	if _, err := cl.Get(ctx, "/eph/owned"); api.CodeOf(err) != api.CodeNotFound {
		t.Errorf("the old session's ephemeral node after the restore: %v, want not found", err)
	}
	if _, err := cl.SessionInfo(ctx, oldSession); err == nil {
		t.Errorf("the old session %s still exists after the restore", oldSession)
	}
}

// checkAboveOld: a new lock's token and a new sequential name are above
// everything the old cluster issued, after the backup too.
func checkAboveOld(t *testing.T, ctx context.Context, cl *client.Client, h *history) {
	t.Helper()
	s, err := cl.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	lock, err := s.AcquireLock(ctx, "backup-lock", 5*time.Second)
	if err != nil || !lock.Held {
		t.Fatalf("acquire lock after the restore: %+v, %v", lock, err)
	}
	if lock.FencingToken <= h.maxToken {
		t.Errorf("token %d after the restore, not above %d issued before it", lock.FencingToken, h.maxToken)
	}
	node, err := cl.Put(ctx, "/seq/item-", "x", client.Sequential())
	if err != nil {
		t.Fatal(err)
	}
	if node.Path <= h.maxSeq {
		t.Errorf("sequential name %s after the restore, not above %s issued before it", node.Path, h.maxSeq)
	}
}

func TestStatusRefusesDamagedFiles(t *testing.T) {
	c := proccluster.Start(t, proccluster.Options{Nodes: 1})
	c.WaitLeader(30 * time.Second)
	cl := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 50 {
		if _, err := cl.Put(ctx, fmt.Sprintf("/k/%03d", i), strings.Repeat("v", 100)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.latch")
	if code, _, errOut := latchctl(t, "--endpoints", c.URLs()[0], "snapshot", "save", good); code != 0 {
		t.Fatalf("snapshot save: exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if s := snapshotStatus(t, good); s.Shards[0].Nodes != 52 { // the root, /k and 50 keys
		t.Fatalf("status counts %d nodes, want 52", s.Shards[0].Nodes)
	}
	damaged := map[string][]byte{
		"truncated-half":  data[:len(data)/2],
		"truncated-1":     data[:len(data)-1],
		"flipped-middle":  flip(data, len(data)/2),
		"flipped-trailer": flip(data, len(data)-10),
		"flipped-header":  flip(data, 20),
	}
	for name, content := range damaged {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := latchctl(t, "snapshot", "status", path)
		if code != cli.ExitOther || !strings.Contains(errOut, path) || !strings.Contains(errOut, "byte offset") {
			t.Errorf("status of %s: exit %d, stderr %q; want exit 1 naming the file and the byte offset", name, code, errOut)
		}
	}
}

func flip(data []byte, at int) []byte {
	out := bytes.Clone(data)
	out[at] ^= 0x40
	return out
}
