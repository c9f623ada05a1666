package zkserver

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"
)

// Four-letter words: a connection whose first four bytes spell one gets a
// plain-text answer in ZooKeeper's format and is closed.

// zooKeeperWords are the four-letter words ZooKeeper 3.8 and 3.9 know
// (their FourLetterCommands). A connection that opens with one of them is
// answered as ZooKeeper answers it: with the word's answer if latch
// implements it (fourLetterWords) and the whitelist allows it, else with
// ZooKeeper's refusal. Any other first four bytes are a frame's length.
var zooKeeperWords = map[string]bool{
	"conf": true, "cons": true, "crst": true, "dirs": true, "dump": true, "envi": true,
	"gtmk": true, "hash": true, "isro": true, "mntr": true, "ruok": true, "srst": true,
	"srvr": true, "stat": true, "stmk": true, "wchc": true, "wchp": true, "wchs": true,
}

// zkVersionString is the ZooKeeper version the port reports: the protocol
// it follows, marked as latch's.
const zkVersionString = "3.8.4-latch"

// fourLetterWords maps each word to its answer.
var fourLetterWords = map[string]func(*conn) string{
	"ruok": func(*conn) string { return "imok" },
	"isro": func(*conn) string { return "rw" },
	"srvr": func(c *conn) string { return c.l.serverStats(false) },
	"stat": func(c *conn) string { return c.l.serverStats(true) },
	"mntr": func(c *conn) string { return c.l.monitor() },
	"conf": func(c *conn) string { return c.l.conf(c.secure()) },
}

// fourLetter answers word, one of zooKeeperWords: with its answer if latch
// implements it and the whitelist allows it, else with ZooKeeper's refusal
// of a word it does not execute.
func (c *conn) fourLetter(word string) {
	var out string
	if answer := fourLetterWords[word]; answer != nil && (c.l.allowed["*"] || c.l.allowed[word]) {
		out = answer(c)
	} else {
		out = word + " is not executed because it is not in the whitelist.\n"
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.nc.Write([]byte(out))
}

// mode is the server state as ZooKeeper names it.
func (l *Listener) mode() string {
	st := l.srv.Status()
	if len(st.Members) == 1 {
		return "standalone"
	}
	switch st.Role {
	case "leader", "follower":
		return st.Role
	case "learner":
		return "observer"
	}
	return "looking"
}

// serverStats is srvr (and, with clients, stat).
func (l *Listener) serverStats(clients bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Zookeeper version: %s, built on 01/01/1970 00:00 GMT\n", zkVersionString)
	if clients {
		b.WriteString("Clients:\n")
		l.mu.Lock()
		for c := range l.conns {
			fmt.Fprintf(&b, " /%s[1](queued=%d,recved=%d,sent=%d)\n", c.nc.RemoteAddr(), c.inFlight.Load(), c.received.Load(), c.sent.Load())
		}
		l.mu.Unlock()
		b.WriteString("\n")
	}
	counts := l.srv.StateCounts()
	minMs, maxMs, avgMs := l.latencies.summary()
	fmt.Fprintf(&b, "Latency min/avg/max: %d/%s/%d\n", minMs, avgMs, maxMs)
	fmt.Fprintf(&b, "Received: %d\n", l.received.Load())
	fmt.Fprintf(&b, "Sent: %d\n", l.sent.Load())
	fmt.Fprintf(&b, "Connections: %d\n", l.connCount())
	fmt.Fprintf(&b, "Outstanding: %d\n", l.outstanding())
	fmt.Fprintf(&b, "Zxid: 0x%x\n", counts.Index)
	fmt.Fprintf(&b, "Mode: %s\n", l.mode())
	fmt.Fprintf(&b, "Node count: %d\n", counts.Nodes)
	return b.String()
}

// monitor is mntr: tab-separated key and value lines.
func (l *Listener) monitor() string {
	counts := l.srv.StateCounts()
	minMs, maxMs, avgMs := l.latencies.summary()
	lines := [][2]any{
		{"zk_version", zkVersionString},
		{"zk_server_state", l.mode()},
		{"zk_avg_latency", avgMs},
		{"zk_max_latency", maxMs},
		{"zk_min_latency", minMs},
		{"zk_packets_received", l.received.Load()},
		{"zk_packets_sent", l.sent.Load()},
		{"zk_num_alive_connections", l.connCount()},
		{"zk_connection_rejected", l.refused.Load()},
		{"zk_outstanding_requests", l.outstanding()},
		{"zk_znode_count", counts.Nodes},
		{"zk_global_sessions", counts.Sessions},
		{"zk_last_zxid", fmt.Sprintf("0x%x", counts.Index)},
		{"zk_uptime", time.Since(l.started).Milliseconds()},
	}
	var b strings.Builder
	for _, kv := range lines {
		fmt.Fprintf(&b, "%s\t%v\n", kv[0], kv[1])
	}
	return b.String()
}

// outstanding is the requests read and not yet answered, over every open
// connection.
func (l *Listener) outstanding() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for c := range l.conns {
		n += c.inFlight.Load()
	}
	return n
}

// secure reports whether the connection came through TLS: the port's
// listener is wrapped in TLS (latchd's client certificates), and then every
// connection of the port is.
func (c *conn) secure() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

// conf is the conf word: the settings a ZooKeeper client can use. The port
// is reported as ZooKeeper reports its own: as clientPort when it is plain
// TCP, as secureClientPort when it takes TLS only (ZooKeeper then prints
// clientPort=-1, having no plain port), the other -1.
func (l *Listener) conf(secure bool) string {
	minMs, maxMs := l.srv.SessionTimeouts()
	port := "-1"
	if i := strings.LastIndex(l.cfg.Addr, ":"); i >= 0 {
		port = l.cfg.Addr[i+1:]
	}
	clientPort, securePort := port, "-1"
	if secure {
		clientPort, securePort = "-1", port
	}
	var b strings.Builder
	fmt.Fprintf(&b, "clientPort=%s\n", clientPort)
	fmt.Fprintf(&b, "secureClientPort=%s\n", securePort)
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", minMs)
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", maxMs)
	fmt.Fprintf(&b, "maxClientCnxns=%d\n", l.cfg.MaxConnectionsPerHost)
	fmt.Fprintf(&b, "serverName=%s\n", l.srv.Name())
	return b.String()
}
