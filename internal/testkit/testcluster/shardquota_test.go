package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/placement"
)

// setQuota sets the quota on prefix through base.
func setQuota(ctx context.Context, base, prefix string, nodes, bytes uint64) error {
	change := api.AuthChange{Action: "quota_set", Prefix: prefix, MaxNodes: nodes, MaxBytes: bytes}
	err, _ := again(ctx, func() error { return Do(ctx, "POST", base, "/v1/auth", nil, change, &api.AuthChanged{}) })
	return err
}

// quotaOf reads the quota on prefix from base's status.
func quotaOf(ctx context.Context, base, prefix string) (api.AuthQuota, error) {
	var st api.AuthStatus
	if err := Do(ctx, "GET", base, "/v1/auth", nil, nil, &st); err != nil {
		return api.AuthQuota{}, err
	}
	for _, q := range st.Quotas {
		if q.Prefix == prefix {
			return q, nil
		}
	}
	return api.AuthQuota{}, fmt.Errorf("no quota on %s", prefix)
}

// watchQuotaLimit reads the quota on prefix from base's status every few
// milliseconds, failing the test if its summed usage is ever over limit,
// until the returned stop is called (stop waits for the reader to end).
func watchQuotaLimit(t *testing.T, ctx context.Context, base, prefix string, limit uint64) (stop func()) {
	watching, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for watching.Err() == nil {
			if q, err := quotaOf(watching, base, prefix); err == nil && q.Nodes > limit {
				t.Errorf("%s holds %d nodes, over its quota of %d: %+v", prefix, q.Nodes, limit, q.Shards)
				return
			}
			time.Sleep(2 * time.Millisecond) // the pace of the reads, not a wait
		}
	}()
	return func() { cancel(); <-done }
}

// allotted sums the shards' allotments of q's nodes.
func allotted(q api.AuthQuota) int64 {
	sum := int64(0)
	for _, s := range q.Shards {
		sum += int64(s.AllotNodes)
	}
	return sum
}

// fillDir creates children of dir through base until one is refused with
// 507, and returns how many it made.
func fillDir(t *testing.T, ctx context.Context, base, dir, value string) int {
	t.Helper()
	for i := 0; ; i++ {
		_, err := put(ctx, base, fmt.Sprintf("%s/fill-%d", dir, i), value, "")
		switch {
		case err == nil:
		case api.CodeOf(err) == api.CodeQuotaExceeded:
			return i
		default:
			t.Fatalf("create under %s: %v", dir, err)
		}
	}
}

// TestShardsQuotaConcurrentWritersStopAtTheLimit: writers on every member
// create nodes at once under a quota'd prefix spread over directories in
// every shard, most in one; the prefix never holds more than its limit, the writers'
// acknowledged creates fit in it, and, once they stopped, every bit of room
// left is usable from the crowded shard: filling its directories reaches
// the limit exactly. The shards' allotments then sum to the limit.
func TestShardsQuotaConcurrentWritersStopAtTheLimit(t *testing.T) {
	seed := uint64(testSeed(t))
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, _ := placement.New(wiringShards)
	// Nine directories have their children in shard 1, one in each other
	// shard: most writes land in shard 1, which must take the others' room
	// while they are written to as well.
	var dirs []string
	perShard := map[int]int{}
	for i := 0; len(dirs) < 12; i++ {
		dir := fmt.Sprintf("/q/d%d", i)
		shard := m.ChildShard(dir)
		if (shard == 1 && perShard[shard] == 9) || (shard != 1 && perShard[shard] == 1) {
			continue
		}
		if _, err := put(ctx, c.URL(0), dir, "", ""); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		perShard[shard]++
	}
	const existing, room = 13, 120 // /q and its 12 directories
	const limit = existing + room
	if err := setQuota(ctx, c.URL(1), "/q", limit, 0); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	// Creates only: a shard's usage never falls, so the sum of what each
	// shard's replica shows (not one cut) is at most the true sum.
	stopWatching := watchQuotaLimit(t, ctx, c.URL(2), "/q", limit)
	defer stopWatching()
	for w := range 8 {
		member, writerSeed := w%3, rng.Uint64()
		wg.Go(func() {
			writeUntilRefused(ctx, t, c.URL(member), w, dirs, rand.New(rand.NewPCG(writerSeed, 1)), &acked)
		})
	}
	wg.Wait()
	stopWatching()
	if acked.Load() > room {
		t.Fatalf("%d creates acknowledged under a quota with room for %d", acked.Load(), room)
	}
	// Whatever room is left anywhere, shard 1's directories alone use it.
	filled := 0
	for _, dir := range dirs {
		if m.ChildShard(dir) == 1 {
			filled += fillDir(t, ctx, c.URL(rng.IntN(3)), dir, "v")
		}
	}
	total := existing
	for _, dir := range dirs {
		n, err := Get(ctx, c.URL(0), dir, "linearizable")
		if err != nil {
			t.Fatal(err)
		}
		total += n.ChildrenCount
	}
	if total != limit {
		t.Fatalf("seed %d: /q holds %d nodes (%d acknowledged by the writers, %d filled after): want exactly %d", seed, total, acked.Load(), filled, limit)
	}
	if !waitFor(30*time.Second, func() bool {
		q, err := quotaOf(ctx, c.URL(0), "/q")
		return err == nil && q.Nodes == limit && allotted(q) == limit
	}) {
		q, err := quotaOf(ctx, c.URL(0), "/q")
		t.Fatalf("status %+v (%v): want %d nodes used and allotted", q, err, limit)
	}
	t.Logf("seed %d: the writers made %d, filling made %d", seed, acked.Load(), filled)
}

// TestShardsQuotaOneDirectoryFillsTheLimit: with every write in one
// directory (so one shard), the whole quota is usable, nodes and bytes:
// the shard takes the other shards' room until the limit, exactly.
func TestShardsQuotaOneDirectoryFillsTheLimit(t *testing.T) {
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := setQuota(ctx, c.URL(0), "/one", 30, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := put(ctx, c.URL(0), "/one/d", "", ""); err != nil {
		t.Fatal(err)
	}
	if made := fillDir(t, ctx, c.URL(2), "/one/d", ""); made != 28 { // 30 less /one and /one/d
		t.Fatalf("one directory took %d nodes of a quota of 30 with 2 used: want 28", made)
	}
	if err := setQuota(ctx, c.URL(1), "/bytes", 0, 100); err != nil {
		t.Fatal(err)
	}
	if made := fillDir(t, ctx, c.URL(1), "/bytes/d", "1234567"); made != 14 { // 98 bytes
		t.Fatalf("one directory took %d values of 7 bytes of a quota of 100 bytes: want 14", made)
	}
	q, err := quotaOf(ctx, c.URL(1), "/bytes")
	if err != nil || q.Bytes != 98 {
		t.Fatalf("status %+v (%v): want 98 bytes", q, err)
	}
}

// TestShardsQuotaOverExistingNodes: a quota set over nodes already in
// several shards counts them (each shard but 0 starts with its usage as
// allotment, shard 0 with the rest), a retried quota_set with the same
// limit changes no allotment, and concurrent writers on every member then
// never take the prefix past the limit; the room left is usable from one
// directory, to the limit exactly.
func TestShardsQuotaOverExistingNodes(t *testing.T) {
	seed := uint64(testSeed(t))
	rng := rand.New(rand.NewPCG(seed, seed>>3))
	c := newShardedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	m, _ := placement.New(wiringShards)
	var dirs []string
	seen := map[int]bool{}
	for i := 0; len(dirs) < wiringShards; i++ {
		dir := fmt.Sprintf("/q/d%d", i)
		if shard := m.ChildShard(dir); !seen[shard] {
			seen[shard] = true
			dirs = append(dirs, dir)
		}
	}
	existing := 1 + len(dirs) // /q and its directories
	for _, dir := range dirs {
		count := 3
		if m.ChildShard(dir) == 1 {
			count = 60 // most of them in one shard other than 0
		}
		for j := range count {
			if _, err := put(ctx, c.URL(j%3), fmt.Sprintf("%s/old-%d", dir, j), "", ""); err != nil {
				t.Fatal(err)
			}
			existing++
		}
	}
	const room = 40
	limit := existing + room
	if err := setQuota(ctx, c.URL(1), "/q", uint64(limit), 0); err != nil {
		t.Fatal(err)
	}
	stopWatching := watchQuotaLimit(t, ctx, c.URL(0), "/q", uint64(limit))
	defer stopWatching()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		member, writerSeed := w%3, rng.Uint64()
		wg.Go(func() {
			writeUntilRefused(ctx, t, c.URL(member), w, dirs, rand.New(rand.NewPCG(writerSeed, 2)), &acked)
		})
	}
	wg.Wait()
	stopWatching()
	if acked.Load() > room {
		t.Fatalf("seed %d: %d creates acknowledged over nodes that left room for %d", seed, acked.Load(), room)
	}
	filled := fillDir(t, ctx, c.URL(rng.IntN(3)), dirs[rng.IntN(len(dirs))], "v")
	total := 1 + len(dirs)
	for _, dir := range dirs {
		n, err := Get(ctx, c.URL(0), dir, "linearizable")
		if err != nil {
			t.Fatal(err)
		}
		total += int(n.ChildrenCount)
	}
	if total != limit {
		t.Fatalf("seed %d: /q holds %d nodes (%d by the writers, %d filled after): want exactly %d", seed, total, acked.Load(), filled, limit)
	}
	// The same quota_set again (a client retrying after a 503): no
	// allotment changes, so no room appears.
	if !waitFor(30*time.Second, func() bool {
		q, err := quotaOf(ctx, c.URL(0), "/q")
		return err == nil && allotted(q) == int64(limit)
	}) {
		t.Fatal("the transfers did not settle")
	}
	before, err := quotaOf(ctx, c.URL(1), "/q")
	if err != nil {
		t.Fatal(err)
	}
	if err := setQuota(ctx, c.URL(2), "/q", uint64(limit), 0); err != nil {
		t.Fatal(err)
	}
	after, err := quotaOf(ctx, c.URL(1), "/q")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after.Shards) != fmt.Sprint(before.Shards) {
		t.Fatalf("a retried quota_set changed the allotments from %+v to %+v", before.Shards, after.Shards)
	}
	for _, dir := range dirs {
		if more := fillDir(t, ctx, c.URL(rng.IntN(3)), dir, "v"); more != 0 {
			t.Fatalf("after a retried quota_set, %s took %d more nodes past the limit of %d", dir, more, limit)
		}
	}
	t.Logf("seed %d: %d nodes before the quota, the writers made %d, filling made %d", seed, existing, acked.Load(), filled)
}

// writeUntilRefused is writer w: it creates nodes through base in
// directories of dirs chosen by rng until the quota refuses three creates
// in a row (or ctx ends), counting the acknowledged ones in acked. An
// error other than a refusal or a 503 fails the test.
func writeUntilRefused(ctx context.Context, t *testing.T, base string, w int, dirs []string, rng *rand.Rand, acked *atomic.Int64) {
	refusals := 0
	for n := 0; refusals < 3 && ctx.Err() == nil; n++ {
		_, err := Put(ctx, base, fmt.Sprintf("%s/w%d-%d", dirs[rng.IntN(len(dirs))], w, n), "v", "")
		switch {
		case err == nil:
			acked.Add(1)
			refusals = 0
		case api.CodeOf(err) == api.CodeQuotaExceeded:
			refusals++
		case api.CodeOf(err) != api.CodeUnavailable:
			t.Errorf("writer %d: %v", w, err)
			return
		}
	}
}
