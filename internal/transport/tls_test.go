package transport

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/tlsconfig"
)

// withTLS returns a tune func that secures a node with cert, trusting ca.
func withTLS(t *testing.T, ca *testcerts.CA, cert *testcerts.Cert) func(*Config) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := cert.Write(t, dir, "peer")
	source, err := tlsconfig.NewSource(tlsconfig.Files{
		CertFile: certFile, KeyFile: keyFile, TrustedCAFile: ca.WriteCA(t, dir, "ca.crt"), ClientCertAuth: true,
	}, 0, testLogger())
	if err != nil {
		t.Fatalf("tls source: %v", err)
	}
	return func(cfg *Config) {
		cfg.ServerTLS = source.ServerConfig()
		cfg.ClientTLS = source.ClientConfig
	}
}

// TestTCPOverMutualTLS: two members with certificates from the peer CA
// exchange messages both ways and a snapshot, all over TLS.
func TestTCPOverMutualTLS(t *testing.T) {
	peerCA := testcerts.NewCA(t, "peer CA")
	a := startNode(t, 1, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{})))
	b := startNode(t, 2, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n2", testcerts.Peer, testcerts.Options{})))
	connect(a, b)
	a.transport.Send(1, []raftpb.Message{app(1, 2, 1, 1, 100)})
	b.transport.Send(1, []raftpb.Message{app(2, 1, 1, 1, 100)})
	waitFor(t, 10*time.Second, "a message each way", func() bool { return a.handler.count() == 1 && b.handler.count() == 1 })

	const size = 3 << 20
	a.snapshots.size = size
	a.transport.Send(1, []raftpb.Message{snapshotMessage(1, 2, 50)})
	waitFor(t, 30*time.Second, "the snapshot report", func() bool { return len(a.handler.snapshotReports()) > 0 })
	if got := a.handler.snapshotReports(); got[0] != (snapshotReport{group: 1, id: 2, status: raft.SnapshotFinish}) {
		t.Fatalf("report %+v, want SnapshotFinish", got)
	}
	if stored := b.snapshots.receivedSnapshots(); len(stored) != 1 || stored[0] != (receivedSnapshot{index: 50, size: size, crc: generatorCRC(size)}) {
		t.Fatalf("stored %+v, want the body of index 50 intact", stored)
	}
}

// refusedPeer checks that intruder's dials to member are refused at the TLS
// handshake and deliver nothing.
func refusedPeer(t *testing.T, member, intruder *node) {
	t.Helper()
	intruder.transport.AddPeer(member.id, member.addr())
	intruder.transport.Send(1, []raftpb.Message{app(intruder.id, member.id, 1, 1, 10)})
	waitFor(t, 10*time.Second, "the intruder's dial to fail", func() bool {
		return intruder.transport.Stats().ConnectionsFailed > 0 && member.transport.Stats().FramesRejected > 0
	})
	if n := member.handler.count(); n != 0 {
		t.Fatalf("member processed %d messages from a refused peer", n)
	}
}

func TestTCPRefusesPeerFromAnotherCA(t *testing.T) {
	peerCA, otherCA := testcerts.NewCA(t, "peer CA"), testcerts.NewCA(t, "other CA")
	member := startNode(t, 1, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{})))
	// The intruder trusts the peer CA, so only the member's check can stop it.
	intruder := startNode(t, 2, 7, "127.0.0.1:0", withTLS(t, peerCA, otherCA.Issue(t, "n2", testcerts.Peer, testcerts.Options{})))
	refusedPeer(t, member, intruder)
}

// TestTCPRefusesClientCertificate: a certificate of the client CA (a
// latch user's) does not open the peer port.
func TestTCPRefusesClientCertificate(t *testing.T) {
	peerCA, clientCA := testcerts.NewCA(t, "peer CA"), testcerts.NewCA(t, "client CA")
	member := startNode(t, 1, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{})))
	intruder := startNode(t, 2, 7, "127.0.0.1:0", withTLS(t, peerCA, clientCA.Issue(t, "alice", testcerts.Client, testcerts.Options{})))
	refusedPeer(t, member, intruder)
}

// TestTCPRefusesPlaintextPeer: a member without TLS cannot talk to one with it.
func TestTCPRefusesPlaintextPeer(t *testing.T) {
	peerCA := testcerts.NewCA(t, "peer CA")
	member := startNode(t, 1, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{})))
	plain := startNode(t, 2, 7, "127.0.0.1:0", nil)
	refusedPeer(t, member, plain)
}

// TestTCPDialerVerifiesTheMember: a dialer refuses a listener whose
// certificate is not from the peer CA, so it never sends it a message.
func TestTCPDialerVerifiesTheMember(t *testing.T) {
	peerCA, otherCA := testcerts.NewCA(t, "peer CA"), testcerts.NewCA(t, "other CA")
	impostor := startNode(t, 1, 7, "127.0.0.1:0", withTLS(t, otherCA, otherCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{})))
	dialer := startNode(t, 2, 7, "127.0.0.1:0", withTLS(t, peerCA, peerCA.Issue(t, "n2", testcerts.Peer, testcerts.Options{})))
	refusedPeer(t, impostor, dialer)
}

func TestTCPTLSConfigGoTogether(t *testing.T) {
	peerCA := testcerts.NewCA(t, "peer CA")
	tune := withTLS(t, peerCA, peerCA.Issue(t, "n1", testcerts.Peer, testcerts.Options{}))
	cfg := Config{ID: 1, ListenAddr: "127.0.0.1:0", Handler: newRecorder()}
	tune(&cfg)
	cfg.ClientTLS = nil
	if _, err := NewTCP(cfg); err == nil {
		t.Fatal("NewTCP accepted ServerTLS without ClientTLS")
	}
}
