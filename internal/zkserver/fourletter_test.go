package zkserver

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// TestFourLetterConfPorts: conf reports a plain port as clientPort and a
// TLS port as secureClientPort, the other -1, as ZooKeeper reports a server
// that has only that port.
func TestFourLetterConfPorts(t *testing.T) {
	words := Config{FourLetterWords: []string{"conf"}}
	plain := startZK(t, 1, words)
	_, port, _ := net.SplitHostPort(plain.addrs[0])
	conf := fourLetterWord(t, plain.addrs[0], "conf")
	if !strings.HasPrefix(conf, "clientPort="+port+"\nsecureClientPort=-1\n") {
		t.Errorf("conf on a plain port %s = %q", port, conf)
	}

	ca := testcerts.NewCA(t, "zk test CA")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "n0", testcerts.Server, testcerts.Options{}).TLS(t)},
		MinVersion: tls.VersionTLS12}
	secure := startZKWith(t, 1, words, testcluster.Options{}, func(ln net.Listener) net.Listener { return tls.NewListener(ln, serverTLS) })
	_, port, _ = net.SplitHostPort(secure.addrs[0])
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", secure.addrs[0],
		&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	conf = readWord(t, nc, "conf")
	if !strings.HasPrefix(conf, "clientPort=-1\nsecureClientPort="+port+"\n") {
		t.Errorf("conf on a TLS port %s = %q", port, conf)
	}
}
