package cli

// Backup commands (docs/operations.md "Backup and restore"):
//
//	snapshot save FILE [--timeout D]
//	    streams a consistent backup of one member's state (GET /v1/snapshot)
//	    into FILE.tmp, verifies it whole (every checksum, every section
//	    decoded), fsyncs it and renames it to FILE; a cut or corrupt stream
//	    leaves no FILE and exits 1 (4 if no member answered).
//	snapshot status FILE
//	    verifies FILE and prints its index, size, node and session counts per
//	    shard; a corrupt file exits 1 with its name and the byte offset.
//
// A new cluster is seeded from FILE with 'latchd restore' (cmd/latchd).

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/backup"
)

func (a *app) snapshotCommand() *cobra.Command {
	snapshot := &cobra.Command{
		Use:   "snapshot",
		Short: "save and inspect backups of a member's state (save, status)",
		Args:  cobra.NoArgs,
	}
	snapshot.AddCommand(a.snapshotSaveCommand(), a.snapshotStatusCommand())
	return snapshot
}

// snapshotStatus is what 'snapshot save' and 'snapshot status' print.
type snapshotStatus struct {
	File          string        `json:"file"`
	Size          int64         `json:"size"`
	Member        string        `json:"member"`
	TakenAtUnixMs uint64        `json:"taken_at_unix_ms"`
	Index         uint64        `json:"index"`
	Shards        []shardStatus `json:"shards"`
}

type shardStatus struct {
	Group    uint64 `json:"group"`
	Index    uint64 `json:"index"`
	Term     uint64 `json:"term"`
	Nodes    uint64 `json:"nodes"`
	Sessions uint64 `json:"sessions"`
}

func newSnapshotStatus(file string, contents *backup.Contents) snapshotStatus {
	h := contents.Header
	out := snapshotStatus{File: file, Size: contents.Size, Member: h.Member, TakenAtUnixMs: h.TakenAtUnixMs, Index: h.MaxIndex()}
	for _, s := range h.Shards {
		out.Shards = append(out.Shards, shardStatus{Group: s.Group, Index: s.Index, Term: s.Term, Nodes: s.NodeCount, Sessions: s.SessionCount})
	}
	return out
}

func (a *app) printSnapshotStatus(status snapshotStatus) error {
	return a.print(status, func(w io.Writer) {
		fmt.Fprintf(w, "file %s: %d bytes, index %d, from member %q at %s\n", status.File, status.Size, status.Index,
			status.Member, time.UnixMilli(int64(status.TakenAtUnixMs)).UTC().Format(time.RFC3339))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARD\tINDEX\tTERM\tNODES\tSESSIONS")
		for _, s := range status.Shards {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", s.Group, s.Index, s.Term, s.Nodes, s.Sessions)
		}
		tw.Flush()
	})
}

func (a *app) snapshotStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status FILE",
		Short: "verify a backup file and print its index, size, node and session counts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			contents, err := readBackupFile(args[0])
			if err != nil {
				return err
			}
			return a.printSnapshotStatus(newSnapshotStatus(args[0], contents))
		},
	}
}

func readBackupFile(name string) (*backup.Contents, error) {
	file, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return backup.Read(file, name)
}

func (a *app) snapshotSaveCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "save FILE",
		Short: "stream a consistent backup of a member's state into FILE, verified",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			contents, err := saveSnapshot(ctx, c, args[0])
			if err != nil {
				return err
			}
			return a.printSnapshotStatus(newSnapshotStatus(args[0], contents))
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "timeout of the whole transfer")
	return cmd
}

// saveSnapshot streams a backup into name+".tmp", verifies it, fsyncs it and
// renames it to name, then fsyncs the directory. Nothing is left under name
// unless the whole file verified.
func saveSnapshot(ctx context.Context, c *client.Client, name string) (contents *backup.Contents, err error) {
	temp := name + ".tmp"
	file, err := os.Create(temp)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			file.Close()
			os.Remove(temp)
		}
	}()
	if _, err := c.SaveSnapshot(ctx, file); err != nil {
		return nil, err
	}
	if err := file.Sync(); err != nil {
		return nil, fmt.Errorf("fsync %s: %w", temp, err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if contents, err = backup.Read(file, temp); err != nil {
		return nil, fmt.Errorf("the member's stream did not verify, nothing saved: %w", err)
	}
	if err := file.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(temp, name); err != nil {
		return nil, err
	}
	return contents, syncDir(filepath.Dir(name))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
