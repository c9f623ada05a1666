package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/backup"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/wal"
)

// backupFile writes a backup of a small state (a session with an ephemeral
// node, a persistent node) taken in a cluster whose token is "old".
func backupFile(t *testing.T) (string, uint64) {
	t.Helper()
	f := fsm.New()
	for i, c := range []command.Command{
		{Op: command.OpMemberSet, Member: command.Member{ID: 99, Name: "old-member", PeerURL: "127.0.0.1:1"}},
		{Op: command.OpSessionCreate, SessionID: 5, TimeoutMs: 5000},
		{Op: command.OpPut, Path: "/eph", Ephemeral: true, SessionID: 5},
		{Op: command.OpPut, Path: "/keep", Value: []byte("v")},
	} {
		if r, _ := f.Apply(uint64(i+1), &c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	h := backup.Header{TokenHash: backup.TokenHash("old"), Member: "old-member", Shards: []backup.Shard{{
		Group: groupOfShard(0), Index: f.Applied(), Term: 4, NodeCount: uint64(f.NodeCount()), SessionCount: 1}}}
	var out bytes.Buffer
	if err := backup.Write(&out, h, []backup.Section{{Group: groupOfShard(0), WriteBody: f.WriteSnapshot}}); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "backup.latch")
	if err := os.WriteFile(name, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return name, f.Applied()
}

func restoreConfig(dir, token string) Config {
	return Config{Name: "a", DataDir: dir, ClusterToken: token,
		InitialCluster: map[string]string{"a": "127.0.0.1:7101", "b": "127.0.0.1:7102", "c": "127.0.0.1:7103"}}
}

func TestRestorePreparesAFirstSnapshotAndALogAboveIt(t *testing.T) {
	file, index := backupFile(t)
	dir := filepath.Join(t.TempDir(), "data")
	restored, err := Restore(restoreConfig(dir, "new"), RestoreOptions{File: file, BumpIndex: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Index != index+1000 {
		t.Fatalf("restored at %d, want the backup's %d + 1000", restored.Index, index)
	}
	cfg := restoreConfig(dir, "new")
	cfg.setDefaults()
	snaps, err := snap.New(cfg.FS, filepath.Join(dir, "snap"), snap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	meta, body, _, err := snaps.Load(groupOfShard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	want := []uint64{MemberID("a"), MemberID("b"), MemberID("c")}
	if meta.Index != restored.Index || meta.Term != 4 || !slices.Equal(slices.Sorted(slices.Values(meta.ConfState.Voters)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("snapshot meta %+v: want index %d, term 4, the three new members as voters", meta, restored.Index)
	}
	state, err := fsm.ReadSnapshot(body)
	if err != nil {
		t.Fatal(err)
	}
	if state.SessionCount() != 0 || len(state.Members()) != 3 || state.Applied() != restored.Index {
		t.Fatalf("restored state: %d sessions, members %+v, applied %d", state.SessionCount(), state.Members(), state.Applied())
	}
	if _, err := state.Get("/eph"); err == nil {
		t.Fatal("the old session's ephemeral node survived the restore")
	}
	log, groups, err := wal.Open(cfg.FS, filepath.Join(dir, "wal"), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	g := groups[groupOfShard(0)]
	if g == nil || g.Snapshot.Index != restored.Index || g.HardState.Commit != restored.Index || len(g.Entries) != 0 {
		t.Fatalf("WAL holds %+v; want a snapshot marker and commit at %d and no entry", g, restored.Index)
	}
	if _, err := os.Stat(dir + ".restoring"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary directory is left: %v", err)
	}
}

func TestRestoreRefuses(t *testing.T) {
	file, _ := backupFile(t)
	existing := t.TempDir()
	data, _ := os.ReadFile(file)
	corrupt := filepath.Join(t.TempDir(), "corrupt.latch")
	if err := os.WriteFile(corrupt, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		file string
		want string
	}{
		{"the old cluster's token", restoreConfig(filepath.Join(t.TempDir(), "d"), "old"), file, "needs a new one"},
		{"an existing data directory", restoreConfig(existing, "new"), file, "exists"},
		{"a truncated file", restoreConfig(filepath.Join(t.TempDir(), "d"), "new"), corrupt, corrupt + " at byte offset"},
		{"a missing file", restoreConfig(filepath.Join(t.TempDir(), "d"), "new"), file + ".missing", "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Restore(tt.cfg, RestoreOptions{File: tt.file})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore: %v, want an error containing %q", err, tt.want)
			}
			if tt.cfg.DataDir != existing {
				if _, statErr := os.Stat(tt.cfg.DataDir); !errors.Is(statErr, os.ErrNotExist) {
					t.Fatalf("a refused restore left %s: %v", tt.cfg.DataDir, statErr)
				}
			}
		})
	}
}

// shardedBackupFile writes a backup of a cluster of 4 shards: a directory
// whose node is in one shard and whose children (a sequential one, and an
// ephemeral one of a session) are in another, with its directory record.
func shardedBackupFile(t *testing.T) (file string, dir string, seq string) {
	t.Helper()
	const shards = 4
	m, err := placement.New(shards)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; dir == ""; i++ {
		d := fmt.Sprintf("/d%d", i)
		if c := m.ChildShard(d); c != 0 && c != m.Shard(d) {
			dir = d
		}
	}
	states := make([]*fsm.FSM, shards)
	for k := range states {
		if states[k], err = fsm.NewShard(k, shards); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(k int, c command.Command) fsm.Result {
		t.Helper()
		r, _ := states[k].Apply(states[k].Applied()+1, &c)
		if r.Err != nil {
			t.Fatalf("shard %d: %v: %v", k, c.Op, r.Err)
		}
		return r
	}
	apply(0, command.Command{Op: command.OpMemberSet, Member: command.Member{ID: 99, Name: "old-member", PeerURL: "127.0.0.1:1"}})
	apply(0, command.Command{Op: command.OpSessionCreate, SessionID: 5, TimeoutMs: 5000})
	made := apply(m.Shard(dir), command.Command{Op: command.OpPut, Path: dir})
	child := m.ChildShard(dir)
	seqNode := apply(child, command.Command{Op: command.OpPut, Path: dir + "/n-", Sequential: true,
		Incarnation: made.Node.CreatedIndex, Observed: states[child].Applied()})
	apply(child, command.Command{Op: command.OpPut, Path: dir + "/eph", Ephemeral: true, SessionID: 5, Observed: states[child].Applied()})
	h := backup.Header{TokenHash: backup.TokenHash("old"), Member: "old-member"}
	var sections []backup.Section
	for k, f := range states {
		h.Shards = append(h.Shards, backup.Shard{Group: groupOfShard(k), Index: f.Applied(), Term: 2,
			NodeCount: uint64(f.NodeCount()), SessionCount: uint64(f.SessionCount())})
		sections = append(sections, backup.Section{Group: groupOfShard(k), WriteBody: f.WriteSnapshot})
	}
	var out bytes.Buffer
	if err := backup.Write(&out, h, sections); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "backup.latch")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, dir, seqNode.Node.Path
}

func TestRestoreOfShardsKeepsEachShardsState(t *testing.T) {
	file, dir, seq := shardedBackupFile(t)
	data := filepath.Join(t.TempDir(), "data")
	restored, err := Restore(restoreConfig(data, "new"), RestoreOptions{File: file, BumpIndex: 1000})
	if err != nil {
		t.Fatal(err)
	}
	cfg := restoreConfig(data, "new")
	cfg.setDefaults()
	cfg.DataDir = data
	srv := &Server{cfg: cfg}
	if count, found, err := srv.readShardCount(); err != nil || !found || count != 4 {
		t.Fatalf("recorded shard count %d (found %v, %v), want 4", count, found, err)
	}
	snaps, err := snap.New(cfg.FS, filepath.Join(data, "snap"), snap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := placement.New(4)
	child := m.ChildShard(dir)
	for k := range 4 {
		_, body, _, err := snaps.Load(groupOfShard(k))
		if err != nil {
			t.Fatal(err)
		}
		state, err := fsm.ReadShardSnapshot(body, k, 4)
		body.Close()
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
		if state.Applied() != restored.Index || state.SessionCount() != 0 {
			t.Fatalf("shard %d: applied %d, %d sessions; want %d, none", k, state.Applied(), state.SessionCount(), restored.Index)
		}
		if members := len(state.Members()); (k == 0) != (members == 3) || (k != 0 && members != 0) {
			t.Fatalf("shard %d holds %d members; want the 3 new ones in shard 0 only", k, members)
		}
		if k != child {
			continue
		}
		if _, err := state.Get(dir + "/eph"); err == nil {
			t.Fatal("the old session's ephemeral node in another shard than 0 survived the restore")
		}
		if _, err := state.Get(seq); err != nil {
			t.Fatalf("the sequential node is lost: %v", err)
		}
		rec, err := state.Directory(dir)
		if err != nil || !rec.Opened || rec.Sequence < restored.Index || rec.ChildrenCount != 1 {
			t.Fatalf("directory record %+v (%v): want open, 1 child, its counter raised to %d", rec, err, restored.Index)
		}
	}
}
