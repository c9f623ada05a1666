package proccluster

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcerts"
)

// Security is the PKI of a cluster started with Options.TLS: one CA for
// the peer port, another for the client port, each member's certificates
// and a client certificate for the test, all as files under Dir.
type Security struct {
	Dir      string
	PeerCA   *testcerts.CA
	ClientCA *testcerts.CA
	// ClientCAFile is the client CA's PEM file: what clients pass as
	// --cacert (the members' client-port certificates chain to it).
	ClientCAFile string
	// UserCertFile and UserKeyFile are a client certificate (common name
	// "test-user") from the client CA: latchctl's --cert and --key.
	UserCertFile, UserKeyFile string
	peerCAFile                string
}

// newSecurity issues the CAs and the test's client certificate.
func newSecurity(t testing.TB, dir string) *Security {
	t.Helper()
	s := &Security{Dir: dir, PeerCA: testcerts.NewCA(t, "latch peer CA"), ClientCA: testcerts.NewCA(t, "latch client CA")}
	s.peerCAFile = s.PeerCA.WriteCA(t, dir, "peer-ca.crt")
	s.ClientCAFile = s.ClientCA.WriteCA(t, dir, "client-ca.crt")
	s.UserCertFile, s.UserKeyFile = s.ClientCA.Issue(t, "test-user", testcerts.Client, testcerts.Options{}).Write(t, dir, "test-user")
	return s
}

// ClientTLS returns a client config that trusts the members' client-port
// certificates and presents the test's client certificate.
func (s *Security) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(s.UserCertFile, s.UserKeyFile)
	if err != nil {
		t.Fatalf("proccluster: test client certificate: %v", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.ClientCA.Pool(), Certificates: []tls.Certificate{pair}}
}

// IssueMemberCerts (re)writes member's certificates for the client and
// peer ports, naming host, and returns the client-port certificate. Called
// again on a running member, it rotates them: the member serves the new
// certificates on its next handshakes, without a restart.
func (s *Security) IssueMemberCerts(t testing.TB, member, host string) *x509.Certificate {
	t.Helper()
	hosts := testcerts.Options{Hosts: []string{host, "localhost"}}
	s.PeerCA.Issue(t, member, testcerts.Peer, hosts).Write(t, s.Dir, member+"-peer")
	client := s.ClientCA.Issue(t, member, testcerts.Server, hosts)
	client.Write(t, s.Dir, member+"-client")
	return client.Leaf
}

// memberFlags are the TLS flags of member, whose certificates
// IssueMemberCerts wrote.
func (s *Security) memberFlags(member string) []string {
	file := func(suffix string) string { return filepath.Join(s.Dir, member+suffix) }
	return []string{
		"--cert-file", file("-client.crt"), "--key-file", file("-client.key"),
		"--trusted-ca-file", s.ClientCAFile, "--client-cert-auth",
		"--peer-cert-file", file("-peer.crt"), "--peer-key-file", file("-peer.key"),
		"--peer-trusted-ca-file", s.peerCAFile,
	}
}

// hostOf returns the host of a client URL or host:port.
func hostOf(addr string) string {
	addr = hostPort(addr)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// hostPort strips the scheme of a client URL.
func hostPort(clientURL string) string {
	if _, rest, ok := strings.Cut(clientURL, "://"); ok {
		return rest
	}
	return clientURL
}

// HTTPClient returns an HTTP client for the members' client API (with the
// test's client certificate under Options.TLS), with a short timeout.
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// newHTTPClient returns the client HTTPClient returns.
func newHTTPClient(t testing.TB, security *Security) *http.Client {
	if security == nil {
		return &http.Client{Timeout: time.Second}
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: security.ClientTLS(t)}}
}
