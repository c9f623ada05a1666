package vfs

import (
	"errors"
	"io"
	"math/rand"
	"syscall"
	"testing"
	"time"
)

func writeFile(t *testing.T, fs *MemFS, name, data string, sync bool) File {
	t.Helper()
	file, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := file.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	return file
}

func contents(t *testing.T, fs *MemFS, name string) (string, bool) {
	t.Helper()
	file, err := fs.Open(name)
	if err != nil {
		return "", false
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data), true
}

func TestCrashKeepsOnlySynced(t *testing.T) {
	tests := []struct {
		name     string
		steps    func(t *testing.T, fs *MemFS)
		file     string
		want     string
		wantGone bool
	}{
		{name: "created-without-dir-sync-vanishes", file: "/d/a", wantGone: true,
			steps: func(t *testing.T, fs *MemFS) { writeFile(t, fs, "/d/a", "x", true) }},
		{name: "synced-file-and-dir-survive", file: "/d/a", want: "x",
			steps: func(t *testing.T, fs *MemFS) { writeFile(t, fs, "/d/a", "x", true); fs.SyncDir("/d") }},
		{name: "unsynced-append-dropped", file: "/d/a", want: "x",
			steps: func(t *testing.T, fs *MemFS) {
				file := writeFile(t, fs, "/d/a", "x", true)
				fs.SyncDir("/d")
				file.Write([]byte("more"))
			}},
		{name: "rename-without-dir-sync-reverts", file: "/d/b", wantGone: true,
			steps: func(t *testing.T, fs *MemFS) {
				writeFile(t, fs, "/d/a", "x", true)
				fs.SyncDir("/d")
				fs.Rename("/d/a", "/d/b")
			}},
		{name: "remove-without-dir-sync-reverts", file: "/d/a", want: "x",
			steps: func(t *testing.T, fs *MemFS) {
				writeFile(t, fs, "/d/a", "x", true)
				fs.SyncDir("/d")
				fs.Remove("/d/a")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := NewMem()
			if err := fs.MkdirAll("/d", 0o755); err != nil {
				t.Fatal(err)
			}
			tt.steps(t, fs)
			got, ok := contents(t, fs.CrashClone(CrashOptions{}), tt.file)
			if tt.wantGone != !ok || got != tt.want {
				t.Fatalf("after crash: %q present=%v; want %q gone=%v", got, ok, tt.want, tt.wantGone)
			}
		})
	}
}

func TestTornSectorsKeepSyncedPrefix(t *testing.T) {
	fs := NewMem()
	fs.MkdirAll("/d", 0o755)
	synced := string(make([]byte, 700))
	file := writeFile(t, fs, "/d/a", synced, true)
	fs.SyncDir("/d")
	file.Write(make([]byte, 3000))
	random := rand.New(rand.NewSource(1))
	for range 50 {
		got, _ := contents(t, fs.CrashClone(CrashOptions{TornSectors: true, Rand: random}), "/d/a")
		if len(got) != 700 && len(got) != 3700 {
			t.Fatalf("torn crash left %d bytes, want the synced or the written size", len(got))
		}
	}
}

func TestFaults(t *testing.T) {
	fs := NewMem()
	fs.MkdirAll("/d", 0o755)
	fs.Inject(Fault{Ops: OpSync, Pattern: "*.wal", Skip: 1, Count: 1, Err: syscall.EIO})
	file := writeFile(t, fs, "/d/x.wal", "a", false)
	other := writeFile(t, fs, "/d/x.snap", "a", false)
	results := []error{file.Sync(), other.Sync(), file.Sync(), file.Sync()}
	if results[0] != nil || results[1] != nil || !errors.Is(results[2], syscall.EIO) || results[3] != nil {
		t.Fatalf("sync results %v; want only the second sync of *.wal to fail with EIO", results)
	}
	fs.Inject(Fault{Ops: OpWrite, Err: syscall.ENOSPC, PartialWrite: true, Count: 1})
	if n, err := file.Write([]byte("abcd")); n != 2 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("partial write: %d, %v", n, err)
	}
	remove := fs.Inject(Fault{Ops: OpRead, Delay: 20 * time.Millisecond})
	start := time.Now()
	file.ReadAt(make([]byte, 1), 0)
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("read not delayed")
	}
	remove()
	fs.CrashAfter(1)
	if _, err := file.Write([]byte("z")); err != nil {
		t.Fatalf("the call before the crash failed: %v", err)
	}
	if err := file.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("call after the crash point: %v, want ErrCrashed", err)
	}
}

// TestFaultHold: a held call blocks, counted, until the hold is closed, and
// then completes; calls the fault does not match, or after its Count, pass.
func TestFaultHold(t *testing.T) {
	fs := NewMem()
	fs.MkdirAll("/d", 0o755)
	file := writeFile(t, fs, "/d/x.wal", "a", false)
	other := writeFile(t, fs, "/d/x.snap", "a", false)
	hold := make(chan struct{})
	remove := fs.Inject(Fault{Ops: OpSync, Pattern: "*.wal", Count: 1, Hold: hold})
	defer remove()
	before := fs.Calls(OpSync)
	done := make(chan error, 1)
	go func() { done <- file.Sync() }()
	deadline := time.Now().Add(10 * time.Second)
	for fs.Calls(OpSync) == before {
		if time.Now().After(deadline) {
			t.Fatal("the held sync was never called")
		}
		time.Sleep(time.Millisecond)
	}
	if err := other.Sync(); err != nil {
		t.Fatalf("a sync the fault does not match: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the held sync returned (%v) before its hold was closed", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the released sync: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sync stayed blocked after its hold was closed")
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("a sync after the fault's Count: %v", err)
	}
}

func TestOSFileLockAndPreallocate(t *testing.T) {
	dir := t.TempDir()
	fs := OS()
	lock, err := fs.Lock(dir + "/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	file, err := fs.Create(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Preallocate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if info, _ := file.Stat(); info.Size() != 1<<20 {
		t.Fatalf("size after preallocate %d", info.Size())
	}
	if err := fs.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}
