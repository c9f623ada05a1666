package process

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/transport"
)

// TestUndecodableEntryExitsProcess has a peer speaking the peer protocol
// (as a member running a binary with another command format would) propose
// an entry latchd cannot decode. Once it is committed, every latchd that
// learns so (at least a quorum) stops before applying it and exits 1, its
// log naming the raft index and the reason; one that never learns it takes
// no write.
func TestUndecodableEntryExitsProcess(t *testing.T) {
	c := proccluster.Start(t, proccluster.Options{Nodes: 3})
	leader := c.WaitLeader(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testcluster.Put(ctx, c.Members[leader].ClientURL, "/before", "v", ""); err != nil {
		t.Fatalf("put: %v", err)
	}
	peer, _ := otherMembers(leader)
	impostor := newImpostor(t, server.MemberID(c.Members[peer].Name))
	leaderID := server.MemberID(c.Members[leader].Name)
	impostor.AddPeer(leaderID, c.Members[leader].PeerAddr)
	garbage := raftpb.Message{Type: raftpb.MsgProp, From: server.MemberID(c.Members[peer].Name), To: leaderID,
		Entries: []raftpb.Entry{{Data: []byte{0xee, 0x01, 0x02, 0x03}}}}
	// The real member redials and replaces the impostor's connection, so
	// the proposal is sent until the members stop.
	// Every member that learns the entry is committed exits; a quorum has
	// the entry, so at least a quorum does. One that never learns the commit
	// (its last leader exited before telling it) is left without a quorum.
	exitedCount := func() int {
		n := 0
		for i := range c.Members {
			if !c.Running(i) {
				n++
			}
		}
		return n
	}
	quorum := len(c.Members)/2 + 1
	if !testcluster.WaitFor(30*time.Second, func() bool {
		impostor.Send(1, []raftpb.Message{garbage})
		return testcluster.WaitFor(300*time.Millisecond, func() bool { return exitedCount() >= quorum })
	}) {
		t.Fatal("fewer than a quorum of members exited 30 s after an undecodable entry was proposed")
	}
	testcluster.WaitFor(5*time.Second, func() bool { return exitedCount() == len(c.Members) }) // usually all
	for i, m := range c.Members {
		if !c.Running(i) {
			continue
		}
		t.Logf("%s never learned the entry was committed: it is left without a quorum", m.Name)
		if _, err := testcluster.Put(ctx, m.ClientURL, "/after", "v", ""); err == nil {
			t.Errorf("%s took a write with a quorum of members exited", m.Name)
		}
	}
	atIndex := regexp.MustCompile(`committed entry at raft index (\d+) `)
	firstIndex := ""
	for i, m := range c.Members {
		if c.Running(i) {
			continue
		}
		var exit *exec.ExitError
		if err := c.ExitError(i); !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%s ended with %v, want exit status 1", m.Name, err)
		}
		log, err := os.ReadFile(m.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "latchd: stopped on a fatal error: server: committed entry at raft index ") ||
			!strings.Contains(string(log), "does not decode, so this replica stopped before applying it: command: unknown format version 238") {
			t.Errorf("%s's log does not name the undecodable entry and why:\n%s", m.Name, log)
		}
		// Every member stopped at the same entry of the one log.
		if found := atIndex.FindSubmatch(log); found != nil {
			if firstIndex == "" {
				firstIndex = string(found[1])
			} else if string(found[1]) != firstIndex {
				t.Errorf("%s stopped at raft index %s, another member at %s", m.Name, found[1], firstIndex)
			}
		}
	}
}

// newImpostor starts a peer transport claiming member id in the cluster of
// latchd's default --cluster-token.
func newImpostor(t *testing.T, id uint64) *transport.TCP {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte("latch-cluster:latch"))
	tr, err := transport.NewTCP(transport.Config{ID: id, ClusterID: h.Sum64(), ListenAddr: "127.0.0.1:0", Handler: ignore{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// ignore is a transport handler that drops what it is given.
type ignore struct{}

func (ignore) Process(context.Context, uint64, raftpb.Message) error            { return nil }
func (ignore) ReceivePeer(context.Context, uint64, transport.PeerMessage) error { return nil }
func (ignore) ReportUnreachable(uint64, uint64)                                 {}
func (ignore) ReportSnapshot(uint64, uint64, raft.SnapshotStatus)               {}
