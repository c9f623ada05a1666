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
// an entry latchd cannot decode. Once it is committed, every latchd stops
// before applying it and exits non-zero, its log naming the raft index and
// the reason.
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
	exited := func() bool {
		for i := range c.Members {
			if c.Running(i) {
				return false
			}
		}
		return true
	}
	if !testcluster.WaitFor(30*time.Second, func() bool {
		impostor.Send(1, []raftpb.Message{garbage})
		return testcluster.WaitFor(300*time.Millisecond, exited)
	}) {
		t.Fatal("members still running 30 s after an undecodable entry was proposed")
	}
	atIndex := regexp.MustCompile(`committed entry at raft index (\d+) `)
	firstIndex := ""
	for i, m := range c.Members {
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
