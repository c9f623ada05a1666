package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
)

// realBackup returns a backup file's bytes streamed by a real member
// holding a few keys.
func realBackup(t *testing.T) []byte {
	t.Helper()
	cluster, env := newCluster(t, 1)
	for _, key := range []string{"/a", "/b", "/c/d"} {
		if r := latchctl(t, env, "", "put", key, "value"); r.code != ExitOK {
			t.Fatalf("put %s: %+v", key, r)
		}
	}
	c, err := client.New(client.Config{Endpoints: cluster.URLs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	if _, err := c.SaveSnapshot(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// servingSnapshot serves body as GET /v1/snapshot, cut after cut bytes
// (the connection then breaks) when cut >= 0.
func servingSnapshot(t *testing.T, body []byte, cut int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		if cut < 0 {
			_, _ = w.Write(body)
			return
		}
		_, _ = w.Write(body[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestSnapshotSaveAndStatus(t *testing.T) {
	t.Parallel()
	_, env := newCluster(t, 1)
	latchctl(t, env, "", "put", "/x", "1")
	file := filepath.Join(t.TempDir(), "b.latch")
	r := latchctl(t, env, "", "snapshot", "save", file)
	if r.code != ExitOK || !strings.Contains(r.stdout, "index") {
		t.Fatalf("snapshot save: %+v", r)
	}
	r = latchctl(t, env, "", "snapshot", "status", file, "-o", "json")
	if r.code != ExitOK || !strings.Contains(r.stdout, `"nodes": 2`) || !strings.Contains(r.stdout, `"sessions": 0`) {
		t.Fatalf("snapshot status: %+v, want 2 nodes (/ and /x) and no session", r)
	}
	if _, err := os.Stat(file + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("save left its temporary file: %v", err)
	}
}

// TestSnapshotSaveRefusesBadStreams: a stream cut anywhere, or damaged, is
// refused and nothing is left under the file's name, nor its temporary.
func TestSnapshotSaveRefusesBadStreams(t *testing.T) {
	t.Parallel()
	good := realBackup(t)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	for _, tt := range []struct {
		name string
		body []byte
		cut  int
	}{
		{"cut in the header", good, 10},
		{"cut in the body", good, len(good) / 2},
		{"cut before the trailer's last byte", good, len(good) - 1},
		{"a flipped bit", flipped, -1},
		{"trailing bytes", append(bytes.Clone(good), 'x'), -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := servingSnapshot(t, tt.body, tt.cut)
			file := filepath.Join(t.TempDir(), "b.latch")
			r := latchctl(t, nil, "", "--endpoints", url, "snapshot", "save", file)
			if r.code == ExitOK {
				t.Fatalf("snapshot save of a bad stream succeeded: %+v", r)
			}
			for _, name := range []string{file, file + ".tmp"} {
				if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a refused save left %s (%v); stderr %q", name, err, r.stderr)
				}
			}
		})
	}
}
