package crashfs_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latch-io/latch/internal/testkit/crashfs"
	"github.com/latch-io/latch/internal/testkit/testseed"
	"github.com/latch-io/latch/internal/vfs"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized journal tests (0: $VFS_SEED or the clock)")

func testSeed(t *testing.T) int64 { return int64(testseed.Pick(t, *seedFlag, "VFS_SEED")) }

// journaled is a data directory under a Journal, with the journal beside it.
type journaled struct {
	t       *testing.T
	fs      *vfs.Journal
	dir     string // the data directory
	journal string
}

func newJournaled(t *testing.T) *journaled {
	t.Helper()
	base := t.TempDir()
	j := &journaled{t: t, dir: filepath.Join(base, "data"), journal: filepath.Join(base, "data.journal")}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	j.reopen()
	return j
}

// reopen starts a new Journal on the same journal file, as a restarted
// process does.
func (j *journaled) reopen() {
	j.t.Helper()
	fs, err := vfs.NewJournal(vfs.OS(), j.journal, j.dir)
	if err != nil {
		j.t.Fatal(err)
	}
	j.fs = fs
}

func (j *journaled) path(name string) string { return filepath.Join(j.dir, name) }

func (j *journaled) create(name string) vfs.File {
	j.t.Helper()
	f, err := j.fs.Create(j.path(name))
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() { f.Close() })
	return f
}

func (j *journaled) syncDir() {
	j.t.Helper()
	if err := j.fs.SyncDir(j.dir); err != nil {
		j.t.Fatal(err)
	}
}

func (j *journaled) cut(opts vfs.CrashOptions) crashfs.CutReport {
	j.t.Helper()
	report, err := crashfs.CutToJournal(j.journal, opts)
	if err != nil {
		j.t.Fatalf("cut: %v", err)
	}
	j.t.Logf("cut: %s", report)
	return report
}

func (j *journaled) contents(name string) []byte {
	j.t.Helper()
	data, err := os.ReadFile(j.path(name))
	if err != nil {
		j.t.Fatal(err)
	}
	return data
}

func (j *journaled) absent(name string) {
	j.t.Helper()
	if _, err := os.Stat(j.path(name)); !errors.Is(err, os.ErrNotExist) {
		j.t.Fatalf("%s exists after the cut (stat: %v)", name, err)
	}
}

func writeAt(t *testing.T, f vfs.File, data []byte, offset int64) {
	t.Helper()
	if _, err := f.WriteAt(data, offset); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, f vfs.File, data []byte) {
	t.Helper()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

func syncFile(t *testing.T, f vfs.File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func filled(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// syncedSegment creates "segment" preallocated to size, with 1000 bytes of
// 'a' written and synced, its name synced too.
func syncedSegment(t *testing.T, j *journaled, size int64) vfs.File {
	t.Helper()
	f := j.create("segment")
	if err := f.Preallocate(size); err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, filled('a', 1000), 0)
	syncFile(t, f)
	j.syncDir()
	return f
}

// checkSyncedThenZeros checks that the cut left "segment" as its 1000
// synced bytes of 'a' then zeros up to size, and dropped dropped bytes.
func checkSyncedThenZeros(t *testing.T, j *journaled, report crashfs.CutReport, size int, dropped int64) {
	t.Helper()
	want := append(filled('a', 1000), make([]byte, size-1000)...)
	if got := j.contents("segment"); !bytes.Equal(got, want) {
		t.Fatalf("segment is not its 1000 synced bytes then zeros to %d bytes (length %d)", size, len(got))
	}
	if report.DroppedBytes != dropped {
		t.Fatalf("dropped %d bytes, want %d", report.DroppedBytes, dropped)
	}
}

func TestJournalCut(t *testing.T) {
	tests := []struct {
		name string
		// run works on the data directory; check looks at it after the cut.
		run   func(t *testing.T, j *journaled)
		check func(t *testing.T, j *journaled, report crashfs.CutReport)
	}{{
		name: "unsynced-tail-dropped",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, filled('a', 1000))
			syncFile(t, f)
			j.syncDir()
			write(t, f, filled('b', 3000))
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if got := j.contents("f"); !bytes.Equal(got, filled('a', 1000)) {
				t.Fatalf("f has %d bytes %.20q..., want the 1000 synced ones", len(got), got)
			}
			if report.DroppedBytes != 3000 || len(report.Files) != 1 || report.Files[0].Durable != 1000 {
				t.Fatalf("report %+v, want 3000 bytes dropped from one file durable to 1000", report)
			}
		},
	}, {
		name: "preallocated-file-keeps-size-loses-unsynced-write",
		run: func(t *testing.T, j *journaled) {
			f := syncedSegment(t, j, 64<<10)
			writeAt(t, f, filled('b', 2000), 1000)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			checkSyncedThenZeros(t, j, report, 64<<10, 2000)
		},
	}, {
		name: "unsynced-writes-on-both-sides-of-a-hole",
		run: func(t *testing.T, j *journaled) {
			f := syncedSegment(t, j, 1<<20)
			writeAt(t, f, filled('b', 100), 1000)
			writeAt(t, f, filled('c', 100), 512<<10)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			checkSyncedThenZeros(t, j, report, 1<<20, 200)
		},
	}, {
		// The WAL's zero-ahead: zeros written and synced past the records
		// are not durable contents; a record written over them and not yet
		// synced is lost.
		name: "unsynced-write-over-synced-zeros-dropped",
		run: func(t *testing.T, j *journaled) {
			f := syncedSegment(t, j, 1<<20)
			writeAt(t, f, make([]byte, 256<<10), 1000)
			syncFile(t, f)
			writeAt(t, f, filled('b', 100), 1000)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			checkSyncedThenZeros(t, j, report, 1<<20, 100)
		},
	}, {
		name: "file-without-directory-sync-removed",
		run: func(t *testing.T, j *journaled) {
			f := j.create("durable")
			write(t, f, []byte("kept"))
			syncFile(t, f)
			j.syncDir()
			g := j.create("unsynced-name")
			write(t, g, []byte("synced contents, unsynced name"))
			syncFile(t, g)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("unsynced-name")
			if got := j.contents("durable"); string(got) != "kept" {
				t.Fatalf("durable = %q", got)
			}
			if len(report.Removed) != 1 || report.Removed[0] != j.path("unsynced-name") || report.RemovedBytes != int64(len("synced contents, unsynced name")) {
				t.Fatalf("removed %v (%d bytes), want the unsynced name", report.Removed, report.RemovedBytes)
			}
		},
	}, {
		name: "rename-without-directory-sync-undone",
		run: func(t *testing.T, j *journaled) {
			f := j.create("temp")
			write(t, f, []byte("snapshot"))
			syncFile(t, f)
			j.syncDir()
			if err := j.fs.Rename(j.path("temp"), j.path("final")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("final")
			if got := j.contents("temp"); string(got) != "snapshot" {
				t.Fatalf("temp = %q", got)
			}
			if len(report.Restored) != 1 {
				t.Fatalf("restored %v, want one rename undone", report.Restored)
			}
		},
	}, {
		name: "rename-with-directory-sync-kept",
		run: func(t *testing.T, j *journaled) {
			f := j.create("temp")
			write(t, f, []byte("snapshot"))
			syncFile(t, f)
			if err := j.fs.Rename(j.path("temp"), j.path("final")); err != nil {
				t.Fatal(err)
			}
			j.syncDir()
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("temp")
			if got := j.contents("final"); string(got) != "snapshot" {
				t.Fatalf("final = %q", got)
			}
			if !report.Empty() {
				t.Fatalf("report %+v, want an empty cut", report)
			}
		},
	}, {
		name: "remove-without-directory-sync-stays-removed",
		run: func(t *testing.T, j *journaled) {
			f := j.create("old")
			write(t, f, []byte("released"))
			syncFile(t, f)
			j.syncDir()
			if err := j.fs.Remove(j.path("old")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("old")
			if len(report.Gone) != 1 {
				t.Fatalf("gone %v, want the removed durable name", report.Gone)
			}
		},
	}, {
		// ext4 hands a removed file's inode number to the next new file:
		// the new file must not be taken for the removed one.
		name: "inode-reused-after-unsynced-remove",
		run: func(t *testing.T, j *journaled) {
			f := j.create("old")
			write(t, f, []byte("old contents"))
			syncFile(t, f)
			j.syncDir()
			if err := j.fs.Remove(j.path("old")); err != nil {
				t.Fatal(err)
			}
			g := j.create("new")
			write(t, g, []byte("new contents"))
			syncFile(t, g)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("old")
			j.absent("new")
		},
	}, {
		name: "truncate-then-sync-is-the-durable-length",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, filled('a', 4000))
			syncFile(t, f)
			j.syncDir()
			if err := f.Truncate(1000); err != nil {
				t.Fatal(err)
			}
			syncFile(t, f)
			writeAt(t, f, filled('b', 500), 1000)
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if got := j.contents("f"); !bytes.Equal(got, filled('a', 1000)) {
				t.Fatalf("f has %d bytes, want the 1000 left by the synced truncate", len(got))
			}
			if report.DroppedBytes != 500 {
				t.Fatalf("dropped %d bytes, want 500", report.DroppedBytes)
			}
		},
	}, {
		// The kill can land between a call and its record: the journal
		// tells files apart by inode, so the rename is still undone.
		name: "rename-whose-record-the-kill-cut-off",
		run: func(t *testing.T, j *journaled) {
			f := j.create("temp")
			write(t, f, []byte("durable under temp"))
			syncFile(t, f)
			j.syncDir()
			if err := os.Rename(j.path("temp"), j.path("final")); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("final")
			if got := j.contents("temp"); string(got) != "durable under temp" {
				t.Fatalf("temp = %q", got)
			}
		},
	}, {
		name: "create-whose-record-the-kill-cut-off",
		run: func(t *testing.T, j *journaled) {
			if err := os.WriteFile(j.path("unrecorded"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			j.absent("unrecorded")
		},
	}, {
		name: "everything-synced-cuts-nothing",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, []byte("all synced"))
			syncFile(t, f)
			j.syncDir()
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if !report.Empty() || string(j.contents("f")) != "all synced" {
				t.Fatalf("report %+v, f %q: want nothing cut", report, j.contents("f"))
			}
		},
	}, {
		name: "journal-continues-in-a-restarted-process",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, filled('a', 1000))
			syncFile(t, f)
			j.syncDir()
			write(t, f, filled('b', 500)) // the first process dies here
			j.reopen()
			g := j.create("g")
			write(t, g, []byte("second process"))
			syncFile(t, g)
			j.syncDir()
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if got := j.contents("f"); !bytes.Equal(got, filled('a', 1000)) {
				t.Fatalf("f has %d bytes, want the first process's 1000 synced ones", len(got))
			}
			if got := j.contents("g"); string(got) != "second process" {
				t.Fatalf("g = %q", got)
			}
		},
	}, {
		// SIGKILL can stop a write(2) between pages: the part of a record
		// it left is dropped before the next process appends.
		name: "torn-record-dropped-on-reopen",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, []byte("synced"))
			syncFile(t, f)
			j.syncDir()
			journal, err := os.OpenFile(j.journal, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			journal.WriteString(`{"op":"sync","path":"/da`)
			journal.Close()
			j.reopen()
			g := j.create("g")
			write(t, g, []byte("after the torn record"))
			syncFile(t, g)
			j.syncDir()
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if string(j.contents("f")) != "synced" || string(j.contents("g")) != "after the torn record" {
				t.Fatalf("f = %q, g = %q", j.contents("f"), j.contents("g"))
			}
		},
	}, {
		name: "cut-twice-keeps-the-first-cut",
		run: func(t *testing.T, j *journaled) {
			f := j.create("f")
			write(t, f, filled('a', 100))
			syncFile(t, f)
			j.syncDir()
			write(t, f, filled('b', 100))
			j.cut(vfs.CrashOptions{})
			j.reopen()
			h := j.create("h")
			write(t, h, []byte("unsynced name"))
		},
		check: func(t *testing.T, j *journaled, report crashfs.CutReport) {
			if got := j.contents("f"); !bytes.Equal(got, filled('a', 100)) {
				t.Fatalf("f has %d bytes, want 100", len(got))
			}
			j.absent("h")
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newJournaled(t)
			tt.run(t, j)
			tt.check(t, j, j.cut(vfs.CrashOptions{}))
		})
	}
}

// TestJournalCutTorn: with torn sectors, the synced prefix survives and each
// unsynced 512-byte sector is either what was written or zeros; over many
// seeds both outcomes occur.
func TestJournalCutTorn(t *testing.T) {
	random := rand.New(rand.NewSource(testSeed(t)))
	const synced, unsynced = 1300, 6000
	kept, zeroed := 0, 0
	for round := range 20 {
		j := newJournaled(t)
		f := j.create("segment")
		if err := f.Preallocate(32 << 10); err != nil {
			t.Fatal(err)
		}
		writeAt(t, f, filled('a', synced), 0)
		syncFile(t, f)
		j.syncDir()
		writeAt(t, f, filled('b', unsynced), synced)
		j.cut(vfs.CrashOptions{TornSectors: true, Rand: random})
		got := j.contents("segment")
		if len(got) != 32<<10 || !bytes.Equal(got[:synced], filled('a', synced)) {
			t.Fatalf("round %d: the synced prefix or the size changed (size %d)", round, len(got))
		}
		for start := synced / vfs.SectorSize * vfs.SectorSize; start < synced+unsynced; start += vfs.SectorSize {
			from, to := max(start, synced), min(start+vfs.SectorSize, synced+unsynced)
			switch part := got[from:to]; {
			case bytes.Equal(part, filled('b', to-from)):
				kept++
			case bytes.Equal(part, make([]byte, to-from)):
				zeroed++
			default:
				t.Fatalf("round %d: sector at %d is neither written nor zero: %q", round, start, part)
			}
		}
		if !bytes.Equal(got[synced+unsynced:], make([]byte, len(got)-synced-unsynced)) {
			t.Fatalf("round %d: bytes past the writes are not zero", round)
		}
	}
	if kept == 0 || zeroed == 0 {
		t.Fatalf("torn cuts kept %d and zeroed %d unsynced sectors: want some of each", kept, zeroed)
	}
}

func TestJournalRefuses(t *testing.T) {
	t.Run("memfs-has-no-inodes", func(t *testing.T) {
		base := t.TempDir()
		_, err := vfs.NewJournal(vfs.NewMem(), filepath.Join(base, "j"), "/data")
		if !errors.Is(err, vfs.ErrNoInodes) {
			t.Fatalf("NewJournal over MemFS: %v, want ErrNoInodes", err)
		}
	})
	t.Run("journal-inside-the-directory", func(t *testing.T) {
		base := t.TempDir()
		_, err := vfs.NewJournal(vfs.OS(), filepath.Join(base, "data", "j"), filepath.Join(base, "data"))
		if err == nil || !strings.Contains(err.Error(), "must not be inside") {
			t.Fatalf("journal inside its directory: %v", err)
		}
	})
	t.Run("cut-while-the-process-holds-its-lock", func(t *testing.T) {
		j := newJournaled(t)
		lock, err := j.fs.Lock(j.path("LOCK"))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		if _, err := crashfs.CutToJournal(j.journal, vfs.CrashOptions{}); !errors.Is(err, crashfs.ErrStillRunning) {
			t.Fatalf("cut under a held lock: %v, want ErrStillRunning", err)
		}
	})
	for _, tt := range []struct{ name, record string }{
		{"malformed-record", "{not json\n"},
		{"unknown-record", `{"op":"format-disk"}` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := newJournaled(t)
			info, err := os.Stat(j.journal)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(j.journal, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(tt.record)
			f.Close()
			_, err = crashfs.CutToJournal(j.journal, vfs.CrashOptions{})
			offset := fmt.Sprintf("offset %d", info.Size())
			if err == nil || !strings.Contains(err.Error(), j.journal) || !strings.Contains(err.Error(), offset) {
				t.Fatalf("cut of a journal with a bad record: %v, want an error naming %s and %s", err, j.journal, offset)
			}
		})
	}
}
