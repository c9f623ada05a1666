package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcerts"
)

// fixture is one port's files, issued by ca, with a client CA beside it.
type fixture struct {
	dir    string
	ca     *testcerts.CA
	files  Files
	logs   *bytes.Buffer
	source *Source
}

func newFixture(t *testing.T, clientCertAuth bool) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), ca: testcerts.NewCA(t, "test CA"), logs: &bytes.Buffer{}}
	certFile, keyFile := f.ca.Issue(t, "server", testcerts.Peer, testcerts.Options{}).Write(t, f.dir, "server")
	f.files = Files{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: f.ca.WriteCA(t, f.dir, "ca.crt"), ClientCertAuth: clientCertAuth}
	source, err := NewSource(f.files, 0, slog.New(slog.NewTextHandler(f.logs, nil)))
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	f.source = source
	return f
}

// outcome is what both ends of one handshake saw.
type outcome struct {
	client    tls.ConnectionState
	clientErr error
	server    tls.ConnectionState
	serverErr error
}

// handshake runs one TLS handshake over loopback between server and client
// configs and returns what each end saw.
func handshake(t *testing.T, server, client *tls.Config) outcome {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	ln = WrapListener(ln, server)
	type result struct {
		state tls.ConnectionState
		err   error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		tlsConn := conn.(*tls.Conn)
		err = tlsConn.Handshake()
		if err == nil {
			// TLS 1.3 servers learn of a refused certificate only on read.
			_, err = tlsConn.Write([]byte{1})
		}
		done <- result{tlsConn.ConnectionState(), err}
	}()
	var out outcome
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		if _, err = conn.Read(b[:]); err == nil {
			out.client = conn.ConnectionState()
		}
		conn.Close()
	}
	out.clientErr = err
	r := <-done
	out.server, out.serverErr = r.state, r.err
	return out
}

func clientConfig(ca *testcerts.CA, cert *testcerts.Cert, t *testing.T) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if cert != nil {
		// Offered whatever CAs the server asks for, as an intruder would.
		pair := cert.TLS(t)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return cfg
}

func wantRefused(t *testing.T, out outcome, clientSays, serverSays string) {
	t.Helper()
	if out.clientErr == nil {
		t.Fatalf("handshake succeeded; want the client to fail with %q", clientSays)
	}
	if !strings.Contains(out.clientErr.Error(), clientSays) {
		t.Errorf("client error %q; want it to contain %q", out.clientErr, clientSays)
	}
	if serverSays != "" && (out.serverErr == nil || !strings.Contains(out.serverErr.Error(), serverSays)) {
		t.Errorf("server error %v; want it to contain %q", out.serverErr, serverSays)
	}
}

func TestClientCertificateIdentity(t *testing.T) {
	f := newFixture(t, true)
	user := f.ca.Issue(t, "alice", testcerts.Client, testcerts.Options{})
	out := handshake(t, f.source.ServerConfig(), clientConfig(f.ca, user, t))
	if out.clientErr != nil || out.serverErr != nil {
		t.Fatalf("handshake: client %v, server %v", out.clientErr, out.serverErr)
	}
	if name, ok := Identity(&out.server); !ok || name != "alice" {
		t.Errorf("Identity = %q, %v; want alice, true", name, ok)
	}
	if out.client.Version < tls.VersionTLS12 {
		t.Errorf("negotiated version %x below TLS 1.2", out.client.Version)
	}
}

func TestIdentityNeedsAVerifiedChain(t *testing.T) {
	f := newFixture(t, false)
	f.files.TrustedCAFile = ""
	source, err := NewSource(f.files, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := handshake(t, source.ServerConfig(), clientConfig(f.ca, nil, t))
	if out.clientErr != nil || out.serverErr != nil {
		t.Fatalf("handshake: client %v, server %v", out.clientErr, out.serverErr)
	}
	if name, ok := Identity(&out.server); ok {
		t.Errorf("Identity = %q without a client certificate; want none", name)
	}
	if _, ok := Identity(nil); ok {
		t.Error("Identity(nil) reported an identity")
	}
}

func TestNoClientCertificateRefusedWhenRequired(t *testing.T) {
	f := newFixture(t, true)
	out := handshake(t, f.source.ServerConfig(), clientConfig(f.ca, nil, t))
	wantRefused(t, out, "certificate required", "didn't provide a certificate")
}

func TestClientCertificateFromAnotherCARefused(t *testing.T) {
	f := newFixture(t, true)
	other := testcerts.NewCA(t, "other CA")
	intruder := other.Issue(t, "mallory", testcerts.Peer, testcerts.Options{})
	out := handshake(t, f.source.ServerConfig(), clientConfig(f.ca, intruder, t))
	wantRefused(t, out, "unknown certificate authority", "certificate signed by unknown authority")
}

func TestServerCertificateFromAnotherCARefused(t *testing.T) {
	f := newFixture(t, false)
	other := testcerts.NewCA(t, "other CA")
	out := handshake(t, f.source.ServerConfig(), clientConfig(other, nil, t))
	wantRefused(t, out, "certificate signed by unknown authority", "")
}

func TestExpiredCertificatesRefused(t *testing.T) {
	f := newFixture(t, true)
	past := testcerts.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}
	expiredClient := f.ca.Issue(t, "alice", testcerts.Client, past)
	out := handshake(t, f.source.ServerConfig(), clientConfig(f.ca, expiredClient, t))
	wantRefused(t, out, "expired certificate", "certificate has expired")

	certFile, keyFile := f.ca.Issue(t, "server", testcerts.Server, past).Write(t, f.dir, "expired")
	expiredServer, err := NewSource(Files{CertFile: certFile, KeyFile: keyFile}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	out = handshake(t, expiredServer.ServerConfig(), clientConfig(f.ca, nil, t))
	wantRefused(t, out, "certificate has expired", "")
}

func TestTLS11Refused(t *testing.T) {
	f := newFixture(t, false)
	old := clientConfig(f.ca, nil, t)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	out := handshake(t, f.source.ServerConfig(), old)
	wantRefused(t, out, "protocol version not supported", "unsupported versions")
}

func TestMinVersion13RefusesTLS12(t *testing.T) {
	f := newFixture(t, false)
	source, err := NewSource(f.files, tls.VersionTLS13, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := clientConfig(f.ca, nil, t)
	old.MaxVersion = tls.VersionTLS12
	out := handshake(t, source.ServerConfig(), old)
	wantRefused(t, out, "protocol version not supported", "unsupported versions")
}

func TestParseMinVersion(t *testing.T) {
	for in, want := range map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13} {
		if got, err := ParseMinVersion(in); err != nil || got != want {
			t.Errorf("ParseMinVersion(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	for _, in := range []string{"1.0", "1.1", "", "tls1.2", "1.4"} {
		if _, err := ParseMinVersion(in); err == nil {
			t.Errorf("ParseMinVersion(%q) accepted", in)
		}
	}
	if _, err := NewSource(Files{CertFile: "a", KeyFile: "b"}, tls.VersionTLS11, nil); err == nil {
		t.Error("NewSource accepted TLS 1.1 as the minimum")
	}
}

func TestFilesCheck(t *testing.T) {
	bad := []Files{
		{CertFile: "c"},
		{KeyFile: "k"},
		{TrustedCAFile: "ca"},
		{CertFile: "c", KeyFile: "k", ClientCertAuth: true},
	}
	for _, f := range bad {
		if err := f.Check("peer-"); err == nil || !strings.Contains(err.Error(), "--peer-") {
			t.Errorf("Check(%+v) = %v; want an error naming a --peer- flag", f, err)
		}
	}
	good := []Files{{}, {CertFile: "c", KeyFile: "k"}, {CertFile: "c", KeyFile: "k", TrustedCAFile: "ca", ClientCertAuth: true}}
	for _, f := range good {
		if err := f.Check(""); err != nil {
			t.Errorf("Check(%+v) = %v", f, err)
		}
	}
}

func TestNewSourceRefusesUnusableFiles(t *testing.T) {
	f := newFixture(t, false)
	garbage := filepath.Join(f.dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := f.ca.Issue(t, "other", testcerts.Server, testcerts.Options{})
	_, otherKey := other.Write(t, f.dir, "other")
	for name, files := range map[string]Files{
		"missing":      {CertFile: filepath.Join(f.dir, "absent.crt"), KeyFile: f.files.KeyFile},
		"garbage cert": {CertFile: garbage, KeyFile: f.files.KeyFile},
		"mismatch":     {CertFile: f.files.CertFile, KeyFile: otherKey},
		"garbage CA":   {CertFile: f.files.CertFile, KeyFile: f.files.KeyFile, TrustedCAFile: garbage},
	} {
		if _, err := NewSource(files, 0, nil); err == nil {
			t.Errorf("%s: NewSource accepted %+v", name, files)
		}
	}
}

// TestRotation: replacing the files makes the next handshake use the new
// certificate and CA, without a new Source; a bad replacement keeps the old.
func TestRotation(t *testing.T) {
	f := newFixture(t, true)
	user := f.ca.Issue(t, "alice", testcerts.Client, testcerts.Options{})
	first := handshake(t, f.source.ServerConfig(), clientConfig(f.ca, user, t))
	if first.clientErr != nil {
		t.Fatalf("first handshake: %v", first.clientErr)
	}
	oldSerial := first.client.PeerCertificates[0].SerialNumber

	// A new CA and a server certificate from it, written over the old files.
	newCA := testcerts.NewCA(t, "rotated CA")
	newServer := newCA.Issue(t, "server", testcerts.Peer, testcerts.Options{})
	newServer.Write(t, f.dir, "server")
	newCA.WriteCA(t, f.dir, "ca.crt")
	newUser := newCA.Issue(t, "alice", testcerts.Client, testcerts.Options{})

	second := handshake(t, f.source.ServerConfig(), clientConfig(newCA, newUser, t))
	if second.clientErr != nil || second.serverErr != nil {
		t.Fatalf("handshake after rotation: client %v, server %v", second.clientErr, second.serverErr)
	}
	if got := second.client.PeerCertificates[0].SerialNumber; got.Cmp(newServer.Leaf.SerialNumber) != 0 || got.Cmp(oldSerial) == 0 {
		t.Fatalf("server presented serial %v after rotation; want the new %v", got, newServer.Leaf.SerialNumber)
	}
	// The old CA's client certificate no longer chains to the trusted CA.
	wantRefused(t, handshake(t, f.source.ServerConfig(), clientConfig(newCA, user, t)), "unknown certificate authority", "unknown authority")

	// A broken certificate file is refused and logged; the rotated one stays.
	if err := os.WriteFile(f.files.CertFile, []byte("truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := handshake(t, f.source.ServerConfig(), clientConfig(newCA, newUser, t))
	if third.clientErr != nil {
		t.Fatalf("handshake after a bad rotation: %v", third.clientErr)
	}
	if got := third.client.PeerCertificates[0].SerialNumber; got.Cmp(newServer.Leaf.SerialNumber) != 0 {
		t.Errorf("server presented serial %v after a bad rotation; want the kept %v", got, newServer.Leaf.SerialNumber)
	}
	if !strings.Contains(f.logs.String(), "new TLS files refused") {
		t.Errorf("bad rotation not logged; logs:\n%s", f.logs)
	}
	// A deleted file is logged too, and the loaded certificate still served.
	if err := os.Remove(f.files.KeyFile); err != nil {
		t.Fatal(err)
	}
	if out := handshake(t, f.source.ServerConfig(), clientConfig(newCA, newUser, t)); out.clientErr != nil {
		t.Fatalf("handshake with a key file gone: %v", out.clientErr)
	}
	if !strings.Contains(f.logs.String(), "TLS files unreadable") {
		t.Errorf("missing file not logged; logs:\n%s", f.logs)
	}
}

func TestClientConfigPresentsCurrentCertificate(t *testing.T) {
	server, peer := newFixture(t, true), newFixture(t, false)
	// peer dials server: each trusts the other's CA.
	server.ca.WriteCA(t, peer.dir, "ca.crt")
	peerCert := server.ca.Issue(t, "n2", testcerts.Peer, testcerts.Options{})
	peerCert.Write(t, peer.dir, "server")
	out := handshake(t, server.source.ServerConfig(), peer.source.ClientConfig("127.0.0.1"))
	if out.clientErr != nil || out.serverErr != nil {
		t.Fatalf("handshake: client %v, server %v", out.clientErr, out.serverErr)
	}
	if name, _ := Identity(&out.server); name != "n2" {
		t.Errorf("server saw %q; want the reloaded n2", name)
	}
}
