package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/latch-io/latch/internal/placement"
	"github.com/latch-io/latch/internal/vfs"
	"github.com/latch-io/latch/internal/wal"
)

// The shard count is fixed for a cluster's life. It is recorded in the data
// directory (file shardsFile, written atomically and fsynced before the
// server starts any group) and checked at every start; shard k runs as
// consensus group k+1, so group 1 (shard 0, the meta group) is the one group
// of a data directory written before sharding, which therefore opens with
// --shards 1 (and no other count).

// shardsFile names the file in the data directory that records --shards.
const shardsFile = "shards"

// shardsFilePrefix starts the file's one line: "latch-shards N\n".
const shardsFilePrefix = "latch-shards "

// ErrShardCount matches (errors.Is) the refusal to open a data directory
// created with another shard count.
var ErrShardCount = errors.New("server: shard count differs from the data directory's")

// groupOfShard is the consensus-group id of shard k.
func groupOfShard(shard int) uint64 { return uint64(shard) + 1 }

// shardOfGroup is the shard of consensus group id (valid for 1..N).
func shardOfGroup(id uint64) int { return int(id) - 1 }

// checkShardCount records the configured shard count in a new data
// directory, or checks it against the recorded one. recovered is what the
// WAL held: a directory with state but no record was written by a server
// from before sharding, which ran one group.
func (s *Server) checkShardCount(recovered map[uint64]*wal.GroupState) error {
	want := s.cfg.Shards
	recorded, found, err := s.readShardCount()
	if err != nil {
		return err
	}
	if !found && len(recovered) > 0 {
		recorded, found = 1, true
	}
	if found && recorded != want {
		return fmt.Errorf("%w: data directory %s was created with --shards %d, not %d: the shard count is fixed for the cluster's life",
			ErrShardCount, s.cfg.DataDir, recorded, want)
	}
	for id := range recovered {
		if id < 1 || id > uint64(want) {
			return fmt.Errorf("%w: data directory %s holds consensus group %d, outside the %d groups of --shards %d",
				ErrShardCount, s.cfg.DataDir, id, want, want)
		}
	}
	if _, statErr := s.cfg.FS.Stat(s.shardsPath()); statErr == nil {
		return nil
	}
	return s.writeShardCount(want)
}

func (s *Server) shardsPath() string { return filepath.Join(s.cfg.DataDir, shardsFile) }

// readShardCount reads the recorded shard count; found is false if the
// data directory has no record.
func (s *Server) readShardCount() (count int, found bool, err error) {
	f, err := s.cfg.FS.Open(s.shardsPath())
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("server: open %s: %w", s.shardsPath(), err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, false, fmt.Errorf("server: read %s: %w", s.shardsPath(), err)
	}
	count, err = parseShardCount(data)
	if err != nil {
		return 0, false, fmt.Errorf("server: %s: %w", s.shardsPath(), err)
	}
	return count, true, nil
}

// parseShardCount decodes the file's one line.
func parseShardCount(data []byte) (int, error) {
	line, ok := bytes.CutSuffix(data, []byte("\n"))
	rest, hasPrefix := strings.CutPrefix(string(line), shardsFilePrefix)
	if !ok || !hasPrefix {
		return 0, fmt.Errorf("not a shard count record (want %q followed by a number and a newline)", shardsFilePrefix)
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 1 || n > placement.MaxShards {
		return 0, fmt.Errorf("shard count %q is not a number from 1 to %d", rest, placement.MaxShards)
	}
	return n, nil
}

// writeShardCount records count in the server's data directory.
func (s *Server) writeShardCount(count int) error {
	return writeShardCountIn(s.cfg.FS, s.cfg.DataDir, count)
}

// writeShardCountIn records count in data directory dir atomically: a
// temporary file, fsynced, renamed over the name, and the directory fsynced.
func writeShardCountIn(fs vfs.FS, dir string, count int) error {
	final := filepath.Join(dir, shardsFile)
	tmp := final + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("server: create %s: %w", tmp, err)
	}
	_, err = f.Write([]byte(shardsFilePrefix + strconv.Itoa(count) + "\n"))
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("server: write %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, final); err != nil {
		return fmt.Errorf("server: rename %s: %w", tmp, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("server: fsync %s: %w", dir, err)
	}
	return nil
}
