package server

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/backup"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
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
