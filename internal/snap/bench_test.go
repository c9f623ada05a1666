package snap

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/vfs"
)

// TestLargeSnapshotTime streams a SNAP_BENCH_BYTES (default 256 MiB)
// snapshot to the real disk and loads it back, timing both and checking the
// heap did not grow with the size. It runs only with SNAP_RECOVERY_BENCH=1:
//
//	SNAP_RECOVERY_BENCH=1 go test -run TestLargeSnapshotTime -v ./internal/snap
func TestLargeSnapshotTime(t *testing.T) {
	if os.Getenv("SNAP_RECOVERY_BENCH") != "1" {
		t.Skip("set SNAP_RECOVERY_BENCH=1 to run")
	}
	total := int64(256 << 20)
	if env := os.Getenv("SNAP_BENCH_BYTES"); env != "" {
		fmt.Sscan(env, &total)
	}
	store, err := New(vfs.OS(), t.TempDir(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	err = store.Save(metaAt(1, 100), func(w io.Writer) error {
		for written := int64(0); written < total; written += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	saveTime := time.Since(start)
	start = time.Now()
	_, body, skipped, err := store.Load(1)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("load: %v %v", err, skipped)
	}
	read, err := io.Copy(io.Discard, body)
	body.Close()
	if err != nil || read != total {
		t.Fatalf("read %d of %d: %v", read, total, err)
	}
	loadTime := time.Since(start)
	runtime.ReadMemStats(&after)
	t.Logf("%d MiB snapshot: Save (stream+fsync+rename) %v (%.0f MB/s); Load (verify pass + read pass) %v (%.0f MB/s); heap allocated in total %d KiB",
		total>>20, saveTime.Round(time.Millisecond), float64(total)/1e6/saveTime.Seconds(),
		loadTime.Round(time.Millisecond), float64(total)/1e6/loadTime.Seconds(), (after.TotalAlloc-before.TotalAlloc)>>10)
}
