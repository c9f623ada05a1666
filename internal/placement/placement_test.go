package placement

import (
	"bufio"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testseed"
)

var (
	seedFlag    = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock)")
	createGold  = flag.Bool("create-golden", false, "write testdata/placement.golden if it does not exist (never overwrites it)")
	goldenPath  = filepath.Join("testdata", "placement.golden")
	goldenSizes = []int{1, 2, 4, 16, 64}
)

// goldenPaths are the paths the golden table pins: the root, top-level
// nodes, lock and election queues, deep and odd (but valid) paths.
var goldenPaths = []string{
	"/", "/a", "/b", "/z", "/config", "/config/flag", "/config/flags", "/services", "/services/web",
	"/services/web/n1", "/services/web/n2", "/services/db/n1", "/locks", "/locks/a", "/locks/b",
	"/locks/a/lock-0000000001", "/locks/a/lock-0000000002", "/locks/b/lock-0000000001",
	"/locks/orders", "/locks/orders/lock-0000000042", "/elections", "/elections/shard-7",
	"/elections/shard-7/candidate-0000000003", "/elections/shard-8/candidate-0000000003",
	"/queue/q-0000000001", "/queue/q-0000000002", "/a/b/c/d/e/f/g", "/a/b/c/d/e/f", "/x/y",
	"/x/y/z", "/with space/child", "/ünïcödé/ключ", "/日本/キー", "/dots/.hidden", "/dots/a.b",
	"/-/_", "/0", "/1", "/2", "/10", "/100", "/tenant-0001/config", "/tenant-0002/config",
	"/tenant-0003/config", "/tenant-0004/config",
}

// goldenLine is one line of the golden table: the path, then its shard for
// each size of goldenSizes.
func goldenLine(path string) string {
	fields := []string{strconv.Quote(path)}
	for _, n := range goldenSizes {
		fields = append(fields, strconv.Itoa(mustNew(n).Shard(path)))
	}
	return strings.Join(fields, " ")
}

func mustNew(n int) Map {
	m, err := New(n)
	if err != nil {
		panic(err)
	}
	return m
}

// TestGolden checks every path of the golden table against the shards
// recorded in testdata/placement.golden. Where data lives must never change
// across versions: a failure here means the placement function changed,
// which breaks every existing cluster; fix the code, not the file.
func TestGolden(t *testing.T) {
	if *createGold {
		writeGolden(t)
	}
	f, err := os.Open(goldenPath)
	if err != nil {
		t.Fatalf("open the golden table: %v", err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	var got []string
	for scanner.Scan() {
		if line := scanner.Text(); line != "" && !strings.HasPrefix(line, "#") {
			got = append(got, line)
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatalf("read the golden table: %v", err)
	}
	if len(got) != len(goldenPaths) {
		t.Fatalf("the golden table has %d lines, want one for each of %d paths", len(got), len(goldenPaths))
	}
	for i, path := range goldenPaths {
		if want := goldenLine(path); got[i] != want {
			t.Errorf("golden line %d: file has %s, the code gives %s", i+1, got[i], want)
		}
	}
}

// writeGolden creates the golden table once; it refuses to overwrite it.
func writeGolden(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# path, then its shard with N = %v shards. Never edit: see doc.go.\n", goldenSizes)
	for _, path := range goldenPaths {
		b.WriteString(goldenLine(path) + "\n")
	}
	f, err := os.OpenFile(goldenPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("create the golden table (it is never overwritten): %v", err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesBadCounts(t *testing.T) {
	tests := []struct {
		name   string
		shards int
		ok     bool
	}{
		{"zero", 0, false},
		{"negative", -1, false},
		{"one", 1, true},
		{"the maximum", MaxShards, true},
		{"over the maximum", MaxShards + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(tt.shards)
			if (err == nil) != tt.ok {
				t.Fatalf("New(%d): error %v, want ok=%v", tt.shards, err, tt.ok)
			}
			if tt.ok && m.Shards() != tt.shards {
				t.Fatalf("New(%d).Shards() = %d", tt.shards, m.Shards())
			}
		})
	}
}

func TestEdgeCases(t *testing.T) {
	for _, n := range []int{1, 2, 4, 16, 64, MaxShards} {
		m := mustNew(n)
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			if m.Shard("/") != m.ChildShard("/") {
				t.Errorf("the root is in shard %d, its children in %d: want them together", m.Shard("/"), m.ChildShard("/"))
			}
			if m.Shard("/locks") != m.Shard("/config") {
				t.Errorf("top-level nodes /locks and /config are in shards %d and %d", m.Shard("/locks"), m.Shard("/config"))
			}
			if m.Shard("/locks/a/lock-0000000001") != m.ChildShard("/locks/a") {
				t.Error("a lock's queue node is not in the shard of the lock's children")
			}
			for _, odd := range []string{"", "relative", "/trailing/", "//", "/a//b"} {
				if s := m.Shard(odd); s < 0 || s >= n {
					t.Errorf("Shard(%q) = %d, out of [0, %d)", odd, s, n)
				}
			}
		})
	}
}

func TestOneShardIsShardZero(t *testing.T) {
	m := mustNew(1)
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	for i := 0; i < 10000; i++ {
		if p := randomPath(rng); m.Shard(p) != 0 {
			t.Fatalf("with one shard, %q is in shard %d", p, m.Shard(p))
		}
	}
}

func TestSiblingsShareAShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 2))
	for _, n := range goldenSizes {
		m := mustNew(n)
		for i := 0; i < 2000; i++ {
			dir := randomPath(rng)
			want := m.ChildShard(dir)
			for j := 0; j < 5; j++ {
				child := api.Join(dir, randomSegment(rng))
				if got := m.Shard(child); got != want {
					t.Fatalf("N=%d: %q is in shard %d, its directory's children in %d", n, child, got, want)
				}
			}
		}
	}
}

func TestParentAgreesWithAPI(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	for i := 0; i < 10000; i++ {
		p := randomPath(rng)
		if err := api.ValidatePath(p); err != nil {
			t.Fatalf("the generator made an invalid path: %v", err)
		}
		if got, want := Parent(p), api.Parent(p); got != want {
			t.Fatalf("Parent(%q) = %q, api.Parent = %q", p, got, want)
		}
	}
}

func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 4))
	for i := 0; i < 1000; i++ {
		p := randomPath(rng)
		for _, n := range goldenSizes {
			a, b := mustNew(n), mustNew(n)
			if a.Shard(p) != b.Shard(p) || a.Shard(p) != a.Shard(strings.Clone(p)) {
				t.Fatalf("N=%d: %q placed differently by two equal maps", n, p)
			}
		}
	}
}

// TestEvenSpread places many random directories and many numbered ones
// (lock names, tenants) and checks that every shard gets between half and
// one and a half times its fair share: loose enough never to fail by chance
// (the standard deviation is about 3% of the share), tight enough to catch
// a hash whose bits do not reach the shard choice.
func TestEvenSpread(t *testing.T) {
	seed := testSeed(t)
	tests := []struct {
		name string
		dir  func(rng *rand.Rand, i int) string
	}{
		{"random directories", func(rng *rand.Rand, _ int) string { return randomPath(rng) }},
		{"numbered locks", func(_ *rand.Rand, i int) string { return fmt.Sprintf("/locks/lock%d", i) }},
		{"numbered tenants", func(_ *rand.Rand, i int) string { return fmt.Sprintf("/tenants/%08d/config", i) }},
	}
	for _, tt := range tests {
		for _, n := range []int{2, 4, 16, 64} {
			t.Run(fmt.Sprintf("%s/N=%d", tt.name, n), func(t *testing.T) {
				checkSpread(t, mustNew(n), rand.New(rand.NewPCG(seed, 5)), tt.dir)
			})
		}
	}
}

func checkSpread(t *testing.T, m Map, rng *rand.Rand, dir func(*rand.Rand, int) string) {
	const perShard = 1000
	counts := make([]int, m.Shards())
	for i := 0; i < perShard*m.Shards(); i++ {
		counts[m.ChildShard(dir(rng, i))]++
	}
	for shard, c := range counts {
		if c < perShard/2 || c > perShard*3/2 {
			t.Errorf("shard %d holds %d directories, want about %d: %v", shard, c, perShard, counts)
		}
	}
}

// TestGrowthMovesFewDirectories checks jump hash's property the split design
// relies on: from N to N+1 shards, a directory either stays or moves to the
// new shard N, and about 1/(N+1) of them move.
func TestGrowthMovesFewDirectories(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 6))
	const dirs = 20000
	for _, n := range []int{1, 3, 4, 15, 16, 63} {
		before, after := mustNew(n), mustNew(n+1)
		moved := 0
		for i := 0; i < dirs; i++ {
			dir := randomPath(rng)
			from, to := before.ChildShard(dir), after.ChildShard(dir)
			if from != to {
				if to != n {
					t.Fatalf("N=%d->%d: %q moved from shard %d to old shard %d", n, n+1, dir, from, to)
				}
				moved++
			}
		}
		want := dirs / (n + 1)
		if moved < want/2 || moved > want*3/2 {
			t.Errorf("N=%d->%d: %d of %d directories moved, want about %d", n, n+1, moved, dirs, want)
		}
	}
}

func TestFNVMatchesStandardLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 7))
	for i := 0; i < 1000; i++ {
		p := randomPath(rng)
		h := fnv.New64a()
		h.Write([]byte(p))
		if got, want := fnv1a(p), h.Sum64(); got != want {
			t.Fatalf("fnv1a(%q) = %#x, hash/fnv = %#x", p, got, want)
		}
	}
}

func TestJumpReferenceValues(t *testing.T) {
	tests := []struct {
		name    string
		key     uint64
		buckets int
		want    int
	}{
		{"one bucket", 0xdeadbeef, 1, 0},
		{"published vector 1", 10863919174838991, 11, 6},
		{"published vector 2", 2016238256797177309, 11, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jump(tt.key, tt.buckets); got != tt.want {
				t.Fatalf("jump(%d, %d) = %d, want %d", tt.key, tt.buckets, got, tt.want)
			}
		})
	}
}

func testSeed(t *testing.T) uint64 { return testseed.Pick(t, *seedFlag, "") }

// randomPath returns a valid path of 1 to 6 segments.
func randomPath(rng *rand.Rand) string {
	var b strings.Builder
	for i := rng.IntN(6); i >= 0; i-- {
		b.WriteString("/" + randomSegment(rng))
	}
	return b.String()
}

const segmentChars = "abcdefghijklmnopqrstuvwxyz0123456789-_.ABCXYZé"

// randomSegment returns a segment of 1 to 12 characters other than "." and "..".
func randomSegment(rng *rand.Rand) string {
	for {
		runes := []rune(segmentChars)
		seg := make([]rune, 1+rng.IntN(12))
		for i := range seg {
			seg[i] = runes[rng.IntN(len(runes))]
		}
		if s := string(seg); s != "." && s != ".." {
			return s
		}
	}
}
