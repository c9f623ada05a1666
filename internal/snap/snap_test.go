package snap

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/testseed"
	"github.com/latch-io/latch/internal/vfs"
)

var seedFlag = flag.Int64("seed", 0, "seed for randomized tests (0: from time or SNAP_SEED)")

func testSeed(t testing.TB) int64 {
	return int64(testseed.Pick(t, uint64(*seedFlag), "SNAP_SEED"))
}

func quiet() Options { return Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))} }

func bodyOf(index uint64, size int) []byte {
	random := rand.New(rand.NewSource(int64(index)))
	body := make([]byte, size)
	random.Read(body)
	return body
}

func metaAt(group, index uint64) Meta {
	return Meta{Group: group, Index: index, Term: index / 10, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}
}

func mustSave(t *testing.T, store *Store, meta Meta, body []byte) {
	t.Helper()
	if err := store.Save(meta, func(w io.Writer) error { _, err := w.Write(body); return err }); err != nil {
		t.Fatalf("save %d: %v", meta.Index, err)
	}
}

func readAllBody(t *testing.T, body io.ReadCloser) []byte {
	t.Helper()
	defer body.Close()
	data, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return data
}

func metaEqual(a, b Meta) bool {
	return a.Group == b.Group && a.Index == b.Index && a.Term == b.Term && a.ConfState.Equivalent(b.ConfState) == nil
}

func TestSaveLoadRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{name: "empty", size: 0},
		{name: "shorter-than-trailer", size: 5},
		{name: "one-buffer", size: 64 << 10},
		{name: "several-buffers", size: 1<<20 + 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := New(vfs.NewMem(), "/snap", quiet())
			if err != nil {
				t.Fatal(err)
			}
			want := bodyOf(7, tt.size)
			mustSave(t, store, metaAt(1, 7), want)
			meta, body, skipped, err := store.Load(1)
			if err != nil || len(skipped) != 0 {
				t.Fatalf("load: %v, skipped %v", err, skipped)
			}
			if !metaEqual(meta, metaAt(1, 7)) {
				t.Fatalf("meta %+v, want %+v", meta, metaAt(1, 7))
			}
			if got := readAllBody(t, body); !bytes.Equal(got, want) {
				t.Fatalf("body of %d bytes differs from the %d saved", len(got), len(want))
			}
		})
	}
}

func TestLoadNoSnapshot(t *testing.T) {
	store, _ := New(vfs.NewMem(), "/snap", quiet())
	mustSave(t, store, metaAt(2, 5), []byte("other group"))
	if _, _, _, err := store.Load(1); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("load of a group without snapshots: %v, want ErrNoSnapshot", err)
	}
}

func TestKeepPrunesOldest(t *testing.T) {
	fs := vfs.NewMem()
	store, _ := New(fs, "/snap", Options{Keep: 2, Logger: quiet().Logger})
	for index := uint64(1); index <= 5; index++ {
		mustSave(t, store, metaAt(1, index*10), bodyOf(index, 100))
	}
	mustSave(t, store, metaAt(2, 3), bodyOf(3, 100))
	names, _ := fs.List("/snap")
	want := []string{fileName(1, 40), fileName(1, 50), fileName(2, 3)}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("files %v, want %v", names, want)
	}
}

// TestCorruptionAtEveryOffset flips one bit at each offset of the newest
// file: Load must skip it, report it naming the file, and return the older one.
func TestCorruptionAtEveryOffset(t *testing.T) {
	fs := vfs.NewMem()
	store, _ := New(fs, "/snap", quiet())
	older, newer := bodyOf(10, 300), bodyOf(20, 1000)
	mustSave(t, store, metaAt(1, 10), older)
	mustSave(t, store, metaAt(1, 20), newer)
	name := "/snap/" + fileName(1, 20)
	original := readRaw(t, fs, name)
	for offset := range original {
		damaged := bytes.Clone(original)
		damaged[offset] ^= 1 << (offset % 8)
		writeRaw(t, fs, name, damaged)
		meta, body, skipped, err := store.Load(1)
		if err != nil {
			t.Fatalf("flip at %d: load: %v", offset, err)
		}
		if meta.Index != 10 || !bytes.Equal(readAllBody(t, body), older) {
			t.Fatalf("flip at %d: loaded index %d, want the older 10", offset, meta.Index)
		}
		var corrupt *CorruptError
		if len(skipped) != 1 || !errors.As(skipped[0], &corrupt) || corrupt.File != name {
			t.Fatalf("flip at %d: skipped %v, want one CorruptError naming %s", offset, skipped, name)
		}
	}
	writeRaw(t, fs, name, original[:len(original)-1])
	if _, _, skipped, _ := store.Load(1); len(skipped) != 1 {
		t.Fatalf("truncated file not reported: %v", skipped)
	}
}

func readRaw(t *testing.T, fs vfs.FS, name string) []byte {
	file, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeRaw(t *testing.T, fs vfs.FS, name string, data []byte) {
	file, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.Write(data); err != nil {
		t.Fatal(err)
	}
}

func TestShipToPeer(t *testing.T) {
	sender, _ := New(vfs.NewMem(), "/a", quiet())
	want := bodyOf(30, 200<<10)
	mustSave(t, sender, metaAt(1, 30), want)
	raw, size, err := sender.OpenFile(1, 30)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(raw)
	raw.Close()
	if int64(len(data)) != size {
		t.Fatalf("OpenFile size %d, read %d", size, len(data))
	}
	tests := []struct {
		name    string
		group   uint64
		index   uint64
		damage  func([]byte) []byte
		wantErr bool
	}{
		{name: "intact", group: 1, index: 30, damage: func(b []byte) []byte { return b }},
		{name: "bit-flip-in-body", group: 1, index: 30, damage: func(b []byte) []byte { b[len(b)/2] ^= 4; return b }, wantErr: true},
		{name: "cut-short", group: 1, index: 30, damage: func(b []byte) []byte { return b[:len(b)-100] }, wantErr: true},
		{name: "wrong-index", group: 1, index: 31, damage: func(b []byte) []byte { return b }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			receiver, _ := New(fs, "/b", quiet())
			meta, err := receiver.ReceiveFile(tt.group, tt.index, bytes.NewReader(tt.damage(bytes.Clone(data))))
			if tt.wantErr {
				names, _ := fs.List("/b")
				if err == nil || len(names) != 0 {
					t.Fatalf("receive: err %v, files %v; want an error and nothing stored", err, names)
				}
				return
			}
			if err != nil || meta.Index != 30 {
				t.Fatalf("receive: %v, meta %+v", err, meta)
			}
			_, body, err := receiver.Open(1, 30)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readAllBody(t, body), want) {
				t.Fatal("received body differs")
			}
		})
	}
}

// TestCrashDuringSave crashes at every filesystem call of a Save: after the
// restart, Load returns the new snapshot whole or the previous one, and an
// acknowledged Save always survives.
func TestCrashDuringSave(t *testing.T) {
	seed := testSeed(t)
	random := rand.New(rand.NewSource(seed))
	for crashAt := 0; crashAt < 12; crashAt++ {
		fs := vfs.NewMem()
		store, _ := New(fs, "/snap", quiet())
		mustSave(t, store, metaAt(1, 10), bodyOf(10, 5000))
		fs.CrashAfter(crashAt)
		err := store.Save(metaAt(1, 20), func(w io.Writer) error { _, err := w.Write(bodyOf(20, 5000)); return err })
		restarted := fs.CrashClone(vfs.CrashOptions{TornSectors: true, Rand: random})
		store, err2 := New(restarted, "/snap", quiet())
		if err2 != nil {
			t.Fatal(err2)
		}
		meta, body, skipped, loadErr := store.Load(1)
		if loadErr != nil || len(skipped) != 0 {
			t.Fatalf("crash at call %d: load %v, skipped %v", crashAt, loadErr, skipped)
		}
		if err == nil && meta.Index != 20 {
			t.Fatalf("crash at call %d: acknowledged snapshot 20 lost (loaded %d)", crashAt, meta.Index)
		}
		if !bytes.Equal(readAllBody(t, body), bodyOf(meta.Index, 5000)) {
			t.Fatalf("crash at call %d: body of %d differs", crashAt, meta.Index)
		}
		if names, _ := restarted.List("/snap"); len(names) > 2 {
			t.Fatalf("crash at call %d: leftover files %v", crashAt, names)
		}
	}
}

func TestInjectedErrorsReturned(t *testing.T) {
	tests := []struct {
		name string
		ops  vfs.Op
	}{
		{name: "write", ops: vfs.OpWrite},
		{name: "fsync", ops: vfs.OpSync},
		{name: "rename", ops: vfs.OpRename},
		{name: "dir-fsync", ops: vfs.OpSyncDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := vfs.NewMem()
			store, _ := New(fs, "/snap", quiet())
			fs.Inject(vfs.Fault{Ops: tt.ops, Err: errors.New("EIO"), Count: 1})
			err := store.Save(metaAt(1, 5), func(w io.Writer) error { _, err := w.Write(bodyOf(5, 10)); return err })
			if err == nil {
				t.Fatal("save succeeded despite an injected failure")
			}
		})
	}
}
