package recipes_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// Contention parameters: contenders on one lock, and how long they contend.
const (
	contenders      = 50
	contentionTime  = 3 * time.Second
	contentionLock  = "contended"
	contentionSlack = 10 // log entries allowed besides enqueues and deletes
)

// tenure is one holder's hold of the lock, stamped on the resource's
// logical clock.
type tenure struct {
	writer   string
	token    uint64
	acquired int64 // stamp taken after Acquire returned
	released int64 // stamp taken before Release was called
}

// TestLockContention runs 50 contenders, each a recipe.Lock over its own
// session, for a bounded time: acquire, two writes through the guard
// (begin, end), release, again. It then checks the guard's log and the
// hand-offs:
//   - every write was accepted, tokens never decrease in the log, and the
//     tenures ordered by token are ordered in time without overlap: each
//     one's release stamp precedes the next one's acquire stamp, and each
//     holder's writes fall inside its own tenure;
//   - no herd: every acquire reply granted the lock (a reply refusing it
//     before its long wait_ms would be a waiter woken for nothing), so each
//     release woke exactly the one waiter that got the lock;
//   - one commit per hand-off: the raft log grew by an enqueue and a delete
//     per tenure (plus those of the waiters that gave up at the end), so no
//     timer or poll writes anything.
func TestLockContention(t *testing.T) {
	cluster := startCluster(t)
	counter := &acquireCounter{base: client.NewTransport(client.Config{})}
	c := newClient(t, cluster.URLs(), counter)
	clock := new(atomic.Int64)
	res := newResource(t, true, clock)
	locks := make([]*recipe.Lock, contenders)
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks[i] = recipe.NewLock(newSessionNoFatal(t, c, 10*time.Second), contentionLock)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	before := appliedIndex(t, cluster)

	// Acquire's wait_ms is bounded by the context's deadline: a long one
	// keeps every wait far longer than the run, which ends by cancel.
	ctx, cancel := context.WithTimeout(context.Background(), contentionTime+time.Minute)
	defer cancel()
	stop := time.AfterFunc(contentionTime, func() {
		counter.ended.Store(true)
		cancel()
	})
	defer stop.Stop()
	started := time.Now()
	results := make([][]tenure, contenders)
	errs := make([]error, contenders)
	for i, lock := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = contend(ctx, lock, fmt.Sprintf("c%02d", i), res, clock)
		}()
	}
	wg.Wait()
	elapsed := time.Since(started)
	for i, err := range errs {
		if err != nil {
			t.Errorf("contender %d: %v", i, err)
		}
	}
	var tenures []tenure
	for _, list := range results {
		tenures = append(tenures, list...)
	}
	after := appliedIndex(t, cluster)
	held, notHeld := counter.counts()
	t.Logf("%d contenders, %d tenures in %v (%.0f/s); acquire replies: %d granted, %d not granted; raft log +%d entries (%.2f per tenure)",
		contenders, len(tenures), elapsed.Round(time.Millisecond), float64(len(tenures))/elapsed.Seconds(),
		held, notHeld, after-before, float64(after-before)/float64(max(len(tenures), 1)))
	if len(tenures) < contenders/5 {
		t.Fatalf("only %d tenures in %v", len(tenures), contentionTime)
	}
	checkTenures(t, tenures, res.Accepted())
	// A granted reply whose body was cut by the final cancel is no tenure.
	if notHeld != 0 || held < len(tenures) || held > len(tenures)+1 {
		t.Errorf("acquire replies: %d granted, %d refused for %d tenures: want one grant per tenure and no waiter woken without the lock", held, notHeld, len(tenures))
	}
	if limit := uint64(2*len(tenures) + 2*contenders + contentionSlack); after-before > limit {
		t.Errorf("raft log grew by %d entries for %d tenures, over %d: hand-offs write more than an enqueue and a delete", after-before, len(tenures), limit)
	}
}

// contend loops acquire, two writes, release until ctx ends, and returns
// its tenures. Only failures while ctx lives are errors.
func contend(ctx context.Context, lock *recipe.Lock, writer string, res *resource, clock *atomic.Int64) ([]tenure, error) {
	var tenures []tenure
	for seq := 0; ctx.Err() == nil; {
		token, err := lock.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return tenures, nil
			}
			return tenures, err
		}
		held := tenure{writer: writer, token: token, acquired: clock.Add(1)}
		for _, what := range []string{"begin", "end"} {
			seq++
			status, err := postWriteToken(res.URL, writeRequest{Writer: writer, Seq: seq, What: what}, token)
			if err != nil || status != http.StatusOK {
				return tenures, fmt.Errorf("write %s with token %d: status %d, %v", what, token, status, err)
			}
		}
		held.released = clock.Add(1)
		tenures = append(tenures, held)
		releaseCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = lock.Release(releaseCtx)
		cancel()
		if err != nil {
			return tenures, fmt.Errorf("release token %d: %w", token, err)
		}
	}
	return tenures, nil
}

// checkTenures fails the test when tenureViolation finds one.
func checkTenures(t *testing.T, tenures []tenure, accepted []write) {
	t.Helper()
	if err := tenureViolation(tenures, accepted); err != nil {
		t.Fatal(err)
	}
}

// tenureViolation checks mutual exclusion from the tenures and the guard's
// log of accepted writes (two per tenure): tokens strictly increase from
// tenure to tenure, each tenure is acquired after the previous one's
// release, the log's tokens never decrease, and every write falls inside
// its own holder's tenure.
func tenureViolation(tenures []tenure, accepted []write) error {
	sorted := slices.Clone(tenures)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].token < sorted[j].token })
	byToken := map[uint64]tenure{}
	for i, held := range sorted {
		byToken[held.token] = held
		if i > 0 && (held.token == sorted[i-1].token || held.acquired < sorted[i-1].released) {
			return fmt.Errorf("tenures overlap: %+v and %+v (tokens must strictly increase, each acquired after the previous release)", sorted[i-1], held)
		}
	}
	if len(accepted) != 2*len(sorted) {
		return fmt.Errorf("guard accepted %d writes for %d tenures of 2 writes", len(accepted), len(sorted))
	}
	for i, w := range accepted {
		if i > 0 && w.Token < accepted[i-1].Token {
			return fmt.Errorf("guard log: token %d accepted after %d", w.Token, accepted[i-1].Token)
		}
		held, ok := byToken[w.Token]
		if !ok || held.writer != w.Writer || w.Stamp < held.acquired || w.Stamp > held.released {
			return fmt.Errorf("guard log: write %+v outside its holder's tenure %+v", w, held)
		}
	}
	return nil
}

// TestTenureChecker shows that the contention checks catch what they
// must: a clean history passes, each planted violation fails.
func TestTenureChecker(t *testing.T) {
	clean := []tenure{{writer: "a", token: 5, acquired: 1, released: 4}, {writer: "b", token: 7, acquired: 5, released: 8}}
	log := func(entries ...write) []write { return entries }
	at := func(writer string, token uint64, stamp int64) write {
		return write{writeRequest: writeRequest{Writer: writer}, Token: token, Stamp: stamp}
	}
	cleanLog := log(at("a", 5, 2), at("a", 5, 3), at("b", 7, 6), at("b", 7, 7))
	tests := []struct {
		name    string
		tenures []tenure
		log     []write
		wantErr bool
	}{
		{name: "clean", tenures: clean, log: cleanLog},
		{name: "tenures overlap", tenures: []tenure{clean[0], {writer: "b", token: 7, acquired: 3, released: 8}}, log: cleanLog, wantErr: true},
		{name: "token repeated", tenures: []tenure{clean[0], {writer: "b", token: 5, acquired: 5, released: 8}}, log: cleanLog, wantErr: true},
		{name: "token decreases in the log", tenures: clean, log: log(at("a", 5, 2), at("b", 7, 6), at("a", 5, 3), at("b", 7, 7)), wantErr: true},
		{name: "write after its release", tenures: clean, log: log(at("a", 5, 2), at("a", 5, 5), at("b", 7, 6), at("b", 7, 7)), wantErr: true},
		{name: "write by another holder", tenures: clean, log: log(at("a", 5, 2), at("b", 5, 3), at("b", 7, 6), at("b", 7, 7)), wantErr: true},
		{name: "write missing", tenures: clean, log: cleanLog[:3], wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tenureViolation(tt.tenures, tt.log)
			if (err != nil) != tt.wantErr {
				t.Fatalf("tenureViolation = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}

// acquireCounter counts the replies to lock acquires: granted (200) and
// not granted (409 lock_not_held).
type acquireCounter struct {
	base    http.RoundTripper
	held    atomic.Int64
	notHeld atomic.Int64
	// ended is set when the run ends: the replies after it answer acquires
	// being given up (the recipe keeps them in flight and releases their
	// places, which the server answers 409), so they are not counted.
	ended atomic.Bool
}

func (a *acquireCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if err != nil || req.URL.Path != "/v1/lock/acquire" || a.ended.Load() {
		return resp, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		a.held.Add(1)
	case http.StatusConflict:
		a.notHeld.Add(1)
	}
	return resp, err
}

func (a *acquireCounter) counts() (held, notHeld int) {
	return int(a.held.Load()), int(a.notHeld.Load())
}

// appliedIndex returns the leader's applied index.
func appliedIndex(t *testing.T, cluster *proccluster.Cluster) uint64 {
	t.Helper()
	leader := cluster.WaitLeader(10 * time.Second)
	st, err := cluster.Status(leader)
	if err != nil {
		t.Fatal(err)
	}
	return st.AppliedIndex
}

// newSessionNoFatal is newSession for goroutines other than the test's: it
// reports a failure with Errorf and returns nil.
func newSessionNoFatal(t *testing.T, c *client.Client, timeout time.Duration) *client.Session {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, timeout)
	if err != nil {
		t.Errorf("new session: %v", err)
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}
