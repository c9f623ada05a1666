package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/backup"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/snap"
	"github.com/latch-io/latch/internal/wal"
)

// DefaultRestoreBump is how far above a backup's index the log of a cluster
// restored from it starts by default (RestoreOptions.BumpIndex).
const DefaultRestoreBump = 1_000_000_000

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// File is the backup file's path.
	File string
	// BumpIndex is added to the backup's index to give the index the new
	// cluster's log starts above. It must exceed the number of entries the
	// old cluster committed after the backup was taken, so no fencing token
	// or sequential name the old cluster issued is issued again. Default
	// DefaultRestoreBump.
	BumpIndex uint64
}

// Restored describes a data directory Restore prepared.
type Restored struct {
	Header backup.Header
	// Index is the index of the first snapshot of every group: the new log
	// starts right above it.
	Index uint64
}

// Restore prepares cfg.DataDir, which must not exist, as the data directory
// of member cfg.Name of a new cluster seeded from a backup file: every
// group's state at the backup's index plus BumpIndex, with the members of
// cfg.InitialCluster as its member table and raft configuration, every
// session of the old cluster ended (their ephemeral nodes deleted), stored as
// the group's first snapshot, and a WAL starting above it. Every member of
// the new cluster is prepared from the same file with the same
// InitialCluster and BumpIndex, then started with latchd as usual.
// cfg.ClusterToken must differ from the old cluster's: peers of the old
// cluster are never taken for members of the new one. The directory is
// built under a temporary name and renamed, so it exists complete or not at
// all.
func Restore(cfg Config, opts RestoreOptions) (Restored, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Restored{}, err
	}
	if opts.BumpIndex == 0 {
		opts.BumpIndex = DefaultRestoreBump
	}
	contents, err := readBackup(cfg, opts.File)
	if err != nil {
		return Restored{}, err
	}
	if err := checkRestorable(cfg, contents.Header); err != nil {
		return Restored{}, err
	}
	// The new cluster keeps the backed-up cluster's shard count: placement
	// depends on it. Its members are started with --shards of that count.
	cfg.Shards = len(contents.Header.Shards)
	index := contents.Header.MaxIndex() + opts.BumpIndex
	if index < opts.BumpIndex {
		return Restored{}, fmt.Errorf("server: restore: bump %d overflows index %d", opts.BumpIndex, contents.Header.MaxIndex())
	}
	if err := prepareDataDir(cfg, contents, index); err != nil {
		return Restored{}, err
	}
	return Restored{Header: contents.Header, Index: index}, nil
}

func readBackup(cfg Config, name string) (*backup.Contents, error) {
	file, err := cfg.FS.Open(name)
	if err != nil {
		return nil, fmt.Errorf("server: restore: %w", err)
	}
	defer file.Close()
	return backup.Read(file, name)
}

// checkRestorable refuses a backup this binary cannot seed a cluster from,
// a reused cluster token and an existing data directory.
func checkRestorable(cfg Config, h backup.Header) error {
	for i, shard := range h.Shards {
		if shard.Group != groupOfShard(i) {
			return fmt.Errorf("server: restore: the backup's section %d holds group %d, not shard %d's group %d", i, shard.Group, i, groupOfShard(i))
		}
	}
	if backup.TokenHash(cfg.ClusterToken) == h.TokenHash {
		return fmt.Errorf("server: restore: cluster token %q is the backed-up cluster's: a restored cluster needs a new one", cfg.ClusterToken)
	}
	if _, err := cfg.FS.Stat(cfg.DataDir); err == nil {
		return fmt.Errorf("server: restore: data directory %s exists; restore prepares a new one", cfg.DataDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("server: restore: %w", err)
	}
	return nil
}

// prepareDataDir writes every group's reseeded state as its first snapshot
// at index, and a WAL whose log starts above it, under a temporary
// directory renamed to cfg.DataDir at the end.
func prepareDataDir(cfg Config, contents *backup.Contents, index uint64) (err error) {
	temp := filepath.Clean(cfg.DataDir) + ".restoring"
	if err := os.RemoveAll(temp); err != nil {
		return fmt.Errorf("server: restore: clear %s: %w", temp, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(temp)
		}
	}()
	members, voters := restoredMembers(cfg)
	snaps, err := snap.New(cfg.FS, filepath.Join(temp, "snap"), snap.Options{Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("server: restore: %w", err)
	}
	for i, state := range contents.States {
		if err := state.Reseed(index, members); err != nil {
			return fmt.Errorf("server: restore group %d: %w", contents.Header.Shards[i].Group, err)
		}
	}
	// The quotas' allotments start afresh from every shard's usage.
	if err := fsm.ShareRestoredQuotas(contents.States); err != nil {
		return fmt.Errorf("server: restore: %w", err)
	}
	var batches []wal.Batch
	for i, state := range contents.States {
		shard := contents.Header.Shards[i]
		term := max(shard.Term, 1)
		meta := snap.Meta{Group: shard.Group, Index: index, Term: term, ConfState: raftpb.ConfState{Voters: voters}}
		if err := snaps.Save(meta, state.WriteSnapshot); err != nil {
			return fmt.Errorf("server: restore group %d: %w", shard.Group, err)
		}
		batches = append(batches, wal.Batch{
			Group:     shard.Group,
			HardState: raftpb.HardState{Term: term, Commit: index},
			Snapshot:  &wal.SnapshotMarker{Index: index, Term: term},
		})
	}
	if err := writeRestoredWAL(cfg, filepath.Join(temp, "wal"), batches); err != nil {
		return err
	}
	if err := writeShardCountIn(cfg.FS, temp, cfg.Shards); err != nil {
		return fmt.Errorf("server: restore: %w", err)
	}
	return renameDataDir(cfg, temp)
}

// restoredMembers are the members of cfg.InitialCluster, as the member table
// and as raft voters.
func restoredMembers(cfg Config) ([]command.Member, []uint64) {
	var members []command.Member
	var voters []uint64
	for _, name := range sortedNames(cfg.InitialCluster) {
		id := MemberID(name)
		members = append(members, command.Member{ID: id, Name: name, PeerURL: cfg.InitialCluster[name]})
		voters = append(voters, id)
	}
	return members, voters
}

func writeRestoredWAL(cfg Config, dir string, batches []wal.Batch) error {
	if err := cfg.FS.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("server: restore: create %s: %w", dir, err)
	}
	log, _, err := wal.Open(cfg.FS, dir, wal.Options{Logger: cfg.Logger, SegmentSize: cfg.WALSegmentSize})
	if err != nil {
		return fmt.Errorf("server: restore: open WAL: %w", err)
	}
	if err := log.Save(batches...); err != nil {
		log.Close()
		return fmt.Errorf("server: restore: write WAL: %w", err)
	}
	if err := log.Close(); err != nil {
		return fmt.Errorf("server: restore: close WAL: %w", err)
	}
	return nil
}

// renameDataDir moves the prepared directory to its name and makes the
// rename durable.
func renameDataDir(cfg Config, temp string) error {
	if err := cfg.FS.SyncDir(temp); err != nil {
		return fmt.Errorf("server: restore: fsync %s: %w", temp, err)
	}
	if err := cfg.FS.Rename(temp, cfg.DataDir); err != nil {
		return fmt.Errorf("server: restore: %w", err)
	}
	if err := cfg.FS.SyncDir(filepath.Dir(filepath.Clean(cfg.DataDir))); err != nil {
		return fmt.Errorf("server: restore: fsync the parent of %s: %w", cfg.DataDir, err)
	}
	return nil
}
