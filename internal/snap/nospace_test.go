package snap

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/latch-io/latch/internal/vfs"
)

// TestNoSpaceBeforeInstall: a full filesystem while the snapshot is written
// (create, write, fsync of its temporary file, or its rename) returns
// ErrNoSpace, leaves no file behind and keeps the newest snapshot loadable;
// after the rename an error is not ErrNoSpace (the snapshot is in place).
func TestNoSpaceBeforeInstall(t *testing.T) {
	for _, op := range []struct {
		name string
		ops  vfs.Op
	}{{"create", vfs.OpCreate}, {"write", vfs.OpWrite}, {"fsync", vfs.OpSync}, {"rename", vfs.OpRename}} {
		t.Run(op.name, func(t *testing.T) {
			fs := vfs.NewMem()
			store, err := New(fs, "/snap", quiet())
			if err != nil {
				t.Fatal(err)
			}
			mustSave(t, store, metaAt(1, 5), bodyOf(5, 100))
			before, _ := fs.List("/snap")
			remove := fs.Inject(vfs.Fault{Ops: op.ops, Err: syscall.ENOSPC, Count: 1})
			err = store.Save(metaAt(1, 9), func(w io.Writer) error { _, err := w.Write(bodyOf(9, 300<<10)); return err })
			remove()
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("save on a full filesystem: %v, want ErrNoSpace", err)
			}
			after, _ := fs.List("/snap")
			if len(after) != len(before) {
				t.Fatalf("files %v after the refused save, want %v", after, before)
			}
			if meta, body, _, err := store.Load(1); err != nil || meta.Index != 5 {
				t.Fatalf("load after the refused save: index %d, %v; want 5", meta.Index, err)
			} else {
				body.Close()
			}
			mustSave(t, store, metaAt(1, 9), bodyOf(9, 100)) // space is back
		})
	}
	// A writer that reports the failed write without wrapping it.
	fs := vfs.NewMem()
	store, _ := New(fs, "/snap", quiet())
	remove := fs.Inject(vfs.Fault{Ops: vfs.OpWrite, Err: syscall.ENOSPC, Count: 1})
	err := store.Save(metaAt(1, 5), func(w io.Writer) error {
		if _, err := w.Write(bodyOf(5, 300<<10)); err != nil {
			return fmt.Errorf("encode: %v", err) // %v: the chain is lost
		}
		return nil
	})
	remove()
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("an unwrapped write error on a full filesystem: %v, want ErrNoSpace", err)
	}

	fs = vfs.NewMem()
	store, _ = New(fs, "/snap", quiet())
	fs.Inject(vfs.Fault{Ops: vfs.OpSyncDir, Err: syscall.ENOSPC, Count: 1})
	err = store.Save(metaAt(1, 5), func(w io.Writer) error { _, err := w.Write(bodyOf(5, 10)); return err })
	if err == nil || errors.Is(err, ErrNoSpace) {
		t.Fatalf("a failed directory fsync after the rename: %v, want an error that is not ErrNoSpace", err)
	}
}
