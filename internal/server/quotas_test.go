package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/fsm"
	"github.com/latch-io/latch/internal/transport"
	"github.com/latch-io/latch/internal/vfs"
)

// startShardedMembers starts a cluster of n members and shards shards, in
// memory, and waits until every shard has a leader.
func startShardedMembers(t *testing.T, n, shards int) []*Server {
	t.Helper()
	network := transport.NewNetwork(1)
	initial := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		initial[name] = "fake-" + name + ":2380"
	}
	var members []*Server
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		s, err := New(Config{
			Name: name, DataDir: "/data", ClientAddr: fmt.Sprintf("127.0.0.1:%d", i+1), PeerAddr: initial[name], Shards: shards,
			InitialCluster: initial, FS: vfs.NewMem(), RequestTimeout: 2 * time.Second,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 10, UnsafeNoSync: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			NewTransport: func(id uint64, h transport.Handler, snaps transport.Snapshots) (transport.Transport, error) {
				return network.Join(id, h, snaps), nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		members = append(members, s)
	}
	waitUntil(t, 30*time.Second, "every shard elects a leader", func() bool {
		for _, g := range members[0].allGroups() {
			if g == nil || g.Leader() == 0 {
				return false
			}
		}
		return true
	})
	// The leader balancer moves leaderships until no member leads two more
	// shards than another; a write pending at such a move ends "outcome
	// unknown". Start once the leaderships have stayed balanced for three
	// election timeouts.
	var balancedSince time.Time
	waitUntil(t, 30*time.Second, "the shard leaderships balanced", func() bool {
		if !leadersBalanced(members) {
			balancedSince = time.Time{}
			return false
		}
		if balancedSince.IsZero() {
			balancedSince = time.Now()
		}
		return time.Since(balancedSince) >= 3*members[0].electionTimeout()
	})
	return members
}

// leadersBalanced reports whether, as members[0] sees them, every shard has
// a leader among members and no member leads two more shards than another.
func leadersBalanced(members []*Server) bool {
	leads := map[uint64]int{}
	for _, s := range members {
		leads[s.id] = 0
	}
	for _, g := range members[0].allGroups() {
		lead := g.Leader()
		if _, ok := leads[lead]; !ok {
			return false
		}
		leads[lead]++
	}
	most, fewest := 0, len(members[0].groups)
	for _, n := range leads {
		most, fewest = max(most, n), min(fewest, n)
	}
	return most-fewest <= 1
}

// waitUntil polls cond until it holds, failing the test at the deadline.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ledgerOf reads, on member s, each shard's allotment of the quota on
// prefix and whether any shard has a transfer in flight.
func ledgerOf(s *Server, prefix string) (allotted []int64, inFlight bool) {
	for _, g := range s.allGroups() {
		g.View(func(f *fsm.FSM) {
			q, _ := f.QuotaShare(prefix)
			allotted = append(allotted, q.AllotNodes)
			inFlight = inFlight || len(f.QuotaTransfers()) > 0
		})
	}
	return allotted, inFlight
}

// TestQuotaTransferSurvivesLeaderChange: room given by a shard whose
// leader then crashes, before any take (the server that gave it is gone),
// is taken by the recipient once: the donor's new leader finishes the
// transfer, and the allotments sum to the limit again with the room where
// it was sent.
func TestQuotaTransferSurvivesLeaderChange(t *testing.T) {
	const shards, limit = 4, 40
	members := startShardedMembers(t, 3, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := members[0].ChangeAuth(ctx, api.AuthChange{Action: "quota_set", Prefix: "/q", MaxNodes: limit}); err != nil {
		if api.CodeOf(err) != api.CodeUnavailable {
			t.Fatal(err)
		}
		// A leader changed under it (an election on a loaded machine):
		// the change completes on its own once applied in shard 0.
		t.Logf("quota_set: %v; waiting for it to reach every shard", err)
		waitUntil(t, 30*time.Second, "the quota in every shard", func() bool {
			for _, g := range members[0].allGroups() {
				found := false
				g.View(func(f *fsm.FSM) { _, found = f.QuotaShare("/q") })
				if !found {
					return false
				}
			}
			return true
		})
	}
	const donor, recipient, moved = 0, 1, 7 // shard 0 holds the whole limit of a quota on an empty prefix
	var leader *Server
	for _, s := range members {
		if g := s.groups[donor].Load(); g.Leader() == s.id {
			leader = s
		}
	}
	if leader == nil {
		t.Fatal("no member leads the donor shard")
	}
	var epoch uint64
	leader.groups[donor].Load().View(func(f *fsm.FSM) { q, _ := f.QuotaShare("/q"); epoch = q.Epoch })
	give := command.AuthOp{Kind: command.AuthQuotaGive, Prefix: "/q", Shard: recipient, Epoch: epoch, MaxNodes: moved}
	if _, err := leader.proposeLedger(ctx, leader.groups[donor].Load(), give); err != nil {
		t.Fatal(err)
	}
	leader.Close() // before any take: its server is gone
	var survivor *Server
	for _, s := range members {
		if s != leader {
			survivor = s
		}
	}
	waitUntil(t, 30*time.Second, "the donor's new leader finishes the transfer", func() bool {
		allotted, inFlight := ledgerOf(survivor, "/q")
		return !inFlight && allotted[recipient] == moved
	})
	allotted, _ := ledgerOf(survivor, "/q")
	sum := int64(0)
	for _, a := range allotted {
		sum += a
	}
	if sum != limit || allotted[donor] != limit-moved {
		t.Fatalf("allotments %v after the transfer: want %d in all, %d in the donor", allotted, limit, limit-moved)
	}
}

// TestQuotaSetReachesEveryShard: quota_set is answered once every shard
// has the quota (each shard but 0 with its usage as allotment, shard 0
// with the rest of the limit), a retried quota_set changes no allotment,
// and a clear leaves every shard; the status sums the usage over the
// shards.
func TestQuotaSetReachesEveryShard(t *testing.T) {
	const shards = 4
	s := startShardedMember(t, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 6 {
		if _, err := s.Put(ctx, PutRequest{Path: fmt.Sprintf("/q/d%d/n", i), Value: []byte("ab")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ChangeAuth(ctx, api.AuthChange{Action: "quota_set", Prefix: "/q", MaxNodes: 103, MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	allotted, _ := ledgerOf(s, "/q")
	used := make([]int64, 0, shards)
	sum := int64(0)
	for _, g := range s.allGroups() {
		g.View(func(f *fsm.FSM) { q, _ := f.QuotaShare("/q"); used = append(used, int64(q.Nodes)) })
	}
	for k, a := range allotted {
		if k > 0 && a != used[k] {
			t.Errorf("shard %d: allotment %d, want its usage %d", k, a, used[k])
		}
		sum += a
	}
	if sum != 103 {
		t.Fatalf("allotments %v (usage %v) sum to %d, not the limit 103", allotted, used, sum)
	}
	if _, err := s.ChangeAuth(ctx, api.AuthChange{Action: "quota_set", Prefix: "/q", MaxNodes: 103, MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	if again, _ := ledgerOf(s, "/q"); fmt.Sprint(again) != fmt.Sprint(allotted) {
		t.Fatalf("a retried quota_set changed the allotments from %v to %v", allotted, again)
	}
	st, err := s.AuthState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Quotas) != 1 || st.Quotas[0].Nodes != 13 || st.Quotas[0].Bytes != 12 || len(st.Quotas[0].Shards) != shards {
		t.Fatalf("status %+v: want 13 nodes (/q, 6 directories, 6 leaves) and 12 bytes over %d shards", st.Quotas, shards)
	}
	if _, err := s.ChangeAuth(ctx, api.AuthChange{Action: "quota_clear", Prefix: "/q"}); err != nil {
		t.Fatal(err)
	}
	for k, g := range s.allGroups() {
		g.View(func(f *fsm.FSM) {
			if _, ok := f.QuotaShare("/q"); ok {
				t.Errorf("shard %d keeps the cleared quota", k)
			}
		})
	}
}
