package fencing

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock)")

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return seed
}

// guards returns one fresh Guard of each kind.
func guards(t *testing.T) map[string]Guard {
	file, err := NewFile(filepath.Join(t.TempDir(), "fencing.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = file.Close() })
	return map[string]Guard{"memory": NewMemory(), "file": file}
}

func TestGuardRule(t *testing.T) {
	type step struct {
		resource string
		token    uint64
		check    bool // Check instead of Accept
		stale    bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first token accepted", []step{{"r", 5, false, false}}},
		{"increasing accepted", []step{{"r", 5, false, false}, {"r", 6, false, false}, {"r", 100, false, false}}},
		{"equal accepted (same holder again)", []step{{"r", 5, false, false}, {"r", 5, false, false}}},
		{"lower rejected", []step{{"r", 5, false, false}, {"r", 4, false, true}, {"r", 5, false, false}}},
		{"rejection changes nothing", []step{{"r", 9, false, false}, {"r", 3, false, true}, {"r", 8, false, true}, {"r", 9, false, false}}},
		{"resources are independent", []step{{"a", 9, false, false}, {"b", 1, false, false}, {"a", 2, false, true}}},
		{"zero is a token", []step{{"r", 0, false, false}, {"r", 0, false, false}, {"r", 1, false, false}, {"r", 0, false, true}}},
		{"check does not record", []step{{"r", 5, true, false}, {"r", 1, false, false}, {"r", 0, true, true}, {"r", 7, true, false}, {"r", 2, false, false}}},
	}
	for _, tt := range tests {
		for kind, g := range guards(t) {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				for i, s := range tt.steps {
					resource := tt.name + "/" + s.resource
					var err error
					if s.check {
						err = g.Check(resource, s.token)
					} else {
						err = g.Accept(resource, s.token)
					}
					if got := errors.Is(err, ErrStaleToken); got != s.stale || (!s.stale && err != nil) {
						t.Fatalf("step %d (%+v): err = %v, want stale=%v", i, s, err, s.stale)
					}
					var stale *StaleTokenError
					if s.stale && (!errors.As(err, &stale) || stale.Token != s.token || stale.Resource != resource) {
						t.Fatalf("step %d: error %v lacks the details", i, err)
					}
				}
			})
		}
	}
}

// TestConcurrentAccepts races writers with random tokens: the final highest
// is the largest token, and every rejected token was below some token
// accepted before the rejection.
func TestConcurrentAccepts(t *testing.T) {
	seed := testSeed(t)
	for kind, g := range guards(t) {
		t.Run(kind, func(t *testing.T) {
			const writers, perWriter = 8, 200
			var mu sync.Mutex // guards maxAccepted
			maxAccepted := map[string]uint64{}
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, uint64(w)))
					for i := 0; i < perWriter; i++ {
						resource := fmt.Sprintf("r%d", rng.IntN(3))
						token := rng.Uint64N(1000)
						err := g.Accept(resource, token)
						mu.Lock()
						if err == nil {
							maxAccepted[resource] = max(maxAccepted[resource], token)
						} else if !errors.Is(err, ErrStaleToken) {
							t.Errorf("Accept: %v", err)
						}
						mu.Unlock()
					}
				}(w)
			}
			wg.Wait()
			for resource, want := range maxAccepted {
				if err := g.Check(resource, want); err != nil {
					t.Errorf("%s: the largest accepted token %d is refused: %v", resource, want, err)
				}
				if want > 0 && g.Check(resource, want-1) == nil {
					t.Errorf("%s: token %d below the largest accepted %d passes", resource, want-1, want)
				}
			}
		})
	}
}

func TestFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencing.log")
	g, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		resource string
		token    uint64
	}{{"a", 3}, {"b", 10}, {"a", 7}, {"a", 7}, {"b", 11}} {
		if err := g.Accept(step.resource, step.token); err != nil {
			t.Fatal(err)
		}
	}
	// No Close: what Accept acknowledged must already be in the file.
	reopened, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	_ = g.Close()
	for resource, want := range map[string]uint64{"a": 7, "b": 11} {
		if got, ok := reopened.Highest(resource); !ok || got != want {
			t.Errorf("after reload %s = %d, want %d", resource, got, want)
		}
		if err := reopened.Accept(resource, want-1); !errors.Is(err, ErrStaleToken) {
			t.Errorf("after reload a stale token for %s passed: %v", resource, err)
		}
	}
	if err := g.Accept("a", 100); !errors.Is(err, ErrClosed) {
		t.Errorf("Accept after Close = %v, want ErrClosed", err)
	}
}

// writeLog makes a log with the given records and returns its bytes and
// the offset of each record.
func writeLog(t *testing.T, path string, tokens ...uint64) ([]byte, []int) {
	t.Helper()
	g, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int
	for _, token := range tokens {
		offsets = append(offsets, int(g.size))
		if err := g.Accept("res", token); err != nil {
			t.Fatal(err)
		}
	}
	_ = g.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data, offsets
}

func TestFileCrashSafety(t *testing.T) {
	dir := t.TempDir()
	pristine, offsets := writeLog(t, filepath.Join(dir, "pristine.log"), 1, 2, 3)
	last := offsets[2]
	flip := func(at int) []byte {
		data := append([]byte(nil), pristine...)
		data[at] ^= 0x40
		return data
	}
	tests := []struct {
		name    string
		data    []byte
		highest uint64 // after a successful open
		errAt   int    // -1: opens; else the offset the error names
	}{
		{"intact", pristine, 3, -1},
		{"last record cut in its header", pristine[:last+5], 2, -1},
		{"last record cut in its payload", pristine[:len(pristine)-1], 2, -1},
		{"zeroed tail after the last record", append(append([]byte(nil), pristine...), make([]byte, 64)...), 3, -1},
		{"last record zeroed", append(append([]byte(nil), pristine[:last]...), make([]byte, len(pristine)-last)...), 2, -1},
		{"last payload garbled (a torn append)", flip(len(pristine) - 2), 2, -1},
		{"crash while creating the file", []byte(fileMagic[:3]), 0, -1},
		{"middle record payload flipped", flip(offsets[1] + recordHeaderSize + 2), 0, offsets[1]},
		{"middle record length flipped", flip(offsets[1] + 1), 0, offsets[1]},
		{"first record checksum flipped", flip(offsets[0] + 9), 0, offsets[0]},
		{"bad magic", flip(0), 0, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case%d.log", i))
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := NewFile(path)
			if tt.errAt >= 0 {
				if err == nil {
					g.Close()
					t.Fatal("opened a corrupt log")
				}
				if want := fmt.Sprintf("%s: offset %d:", path, tt.errAt); !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer g.Close()
			if got, _ := g.Highest("res"); got != tt.highest {
				t.Fatalf("highest = %d, want %d", got, tt.highest)
			}
			// The repaired log takes new records and reloads cleanly.
			if err := g.Accept("res", 50); err != nil {
				t.Fatal(err)
			}
			again, err := NewFile(path)
			if err != nil {
				t.Fatalf("reopen after repair: %v", err)
			}
			defer again.Close()
			if got, _ := again.Highest("res"); got != 50 {
				t.Fatalf("after repair and reload highest = %d, want 50", got)
			}
		})
	}
}

func TestFileCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fencing.log")
	g, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const accepts = 3000
	for token := uint64(1); token <= accepts; token++ {
		if err := g.Accept(fmt.Sprintf("r%d", token%3), token); err != nil {
			t.Fatal(err)
		}
	}
	if g.records > compactThreshold(3) {
		t.Fatalf("log holds %d records, over the threshold", g.records)
	}
	_ = g.Close()
	reopened, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	for i, want := range []uint64{accepts, accepts - 2, accepts - 1} {
		if got, _ := reopened.Highest(fmt.Sprintf("r%d", i)); got != want {
			t.Errorf("r%d = %d, want %d", i, got, want)
		}
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Errorf("temp file left behind: %v", err)
	}
}

func TestMiddleware(t *testing.T) {
	g := NewMemory()
	var writes []string // guarded by the middleware's per-resource serialization (one resource)
	handler := Middleware(g, func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/objects/") },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writes = append(writes, r.Header.Get("Latch-Fencing-Token"))
			w.WriteHeader(http.StatusNoContent)
		}))
	tests := []struct {
		name   string
		path   string
		token  string // "" = no header
		status int
		body   string
	}{
		{"missing header", "/objects/x", "", http.StatusBadRequest, "missing Latch-Fencing-Token"},
		{"malformed header", "/objects/x", "12abc", http.StatusBadRequest, "bad Latch-Fencing-Token"},
		{"negative", "/objects/x", "-1", http.StatusBadRequest, "bad Latch-Fencing-Token"},
		{"no resource", "/objects/", "5", http.StatusBadRequest, "no fenced resource"},
		{"first holder", "/objects/x", "5", http.StatusNoContent, ""},
		{"same holder again", "/objects/x", "5", http.StatusNoContent, ""},
		{"new holder", "/objects/x", "9", http.StatusNoContent, ""},
		{"old holder wakes up", "/objects/x", "5", http.StatusConflict, "stale token 5"},
		{"other resource", "/objects/y", "1", http.StatusNoContent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("PUT", tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Latch-Fencing-Token", tt.token)
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tt.status, tt.body)
			}
		})
	}
	if got := strings.Join(writes, ","); got != "5,5,9,1" {
		t.Fatalf("writes reaching the store = %s, want 5,5,9,1", got)
	}
}

// TestMiddlewareSerializesPerResource races holders with random tokens on
// one resource through the middleware; the store's log of applied writes
// must never go down, which needs Accept and the write to be one step.
func TestMiddlewareSerializesPerResource(t *testing.T) {
	seed := testSeed(t)
	var storeMu sync.Mutex // guards applied
	var applied []uint64
	handler := Middleware(NewMemory(), func(*http.Request) string { return "shared" },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, _ := strconv.ParseUint(r.Header.Get("Latch-Fencing-Token"), 10, 64)
			time.Sleep(time.Duration(token%3) * 50 * time.Microsecond) // widen the race window
			storeMu.Lock()
			applied = append(applied, token)
			storeMu.Unlock()
		}))
	server := httptest.NewServer(handler)
	defer server.Close()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; i < 50; i++ {
				req, _ := http.NewRequest("PUT", server.URL, nil)
				req.Header.Set("Latch-Fencing-Token", strconv.FormatUint(rng.Uint64N(500), 10))
				resp, err := server.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		}(w)
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("store applied token %d after %d (write %d)", applied[i], applied[i-1], i)
		}
	}
	t.Logf("%d writes applied in non-decreasing token order", len(applied))
}
