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

// TestFourLetterWordsNotExecuted: a ZooKeeper four-letter word latch does
// not implement, and an implemented word outside the whitelist, get
// ZooKeeper's refusal and the connection closes; four bytes that are no
// word are a frame's length, as before.
func TestFourLetterWordsNotExecuted(t *testing.T) {
	c := startZK(t, 1, Config{FourLetterWords: []string{"*"}})
	for _, word := range []string{"cons", "dump", "envi", "wchs", "wchc", "wchp", "dirs", "crst", "srst", "gtmk", "stmk", "hash"} {
		if got, want := fourLetterWord(t, c.addrs[0], word), word+" is not executed because it is not in the whitelist.\n"; got != want {
			t.Errorf("%s with the whitelist * = %q, want %q", word, got, want)
		}
	}
	if got := fourLetterWord(t, c.addrs[0], "ruok"); got != "imok" {
		t.Errorf("ruok with the whitelist * = %q", got)
	}
	d := startZK(t, 1, Config{FourLetterWords: []string{"ruok"}})
	if got := fourLetterWord(t, d.addrs[0], "mntr"); got != "mntr is not executed because it is not in the whitelist.\n" {
		t.Errorf("mntr outside the whitelist = %q", got)
	}
	if got := fourLetterWord(t, d.addrs[0], "cons"); got != "cons is not executed because it is not in the whitelist.\n" {
		t.Errorf("cons = %q", got)
	}
	// Not a word of ZooKeeper's: a frame longer than jute.maxbuffer, so
	// the connection closes unanswered.
	if got := fourLetterWord(t, d.addrs[0], "reqs"); got != "" {
		t.Errorf("reqs = %q, want no answer", got)
	}
}

// TestParseFourLetterWordsRefusesUnimplemented: the whitelist takes the
// words latch implements, and refuses ZooKeeper's others at startup.
func TestParseFourLetterWordsRefusesUnimplemented(t *testing.T) {
	if got, err := ParseFourLetterWords("ruok, srvr,*"); err != nil || len(got) != 3 {
		t.Errorf("ParseFourLetterWords(ruok, srvr,*) = %v, %v", got, err)
	}
	for _, word := range []string{"cons", "dump", "wchs", "nope"} {
		if _, err := ParseFourLetterWords("ruok," + word); err == nil {
			t.Errorf("ParseFourLetterWords(ruok,%s) accepted it", word)
		}
	}
}
