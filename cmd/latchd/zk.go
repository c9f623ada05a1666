package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/zkserver"
)

// zkOptions are the flags of the ZooKeeper-protocol listener.
type zkOptions struct {
	addr      string // --listen-zk; empty: off
	whitelist string // --zk-4lw-whitelist
	words     []string
	perHost   int // --zk-max-client-cnxns; 0: no cap
}

func (o *zkOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "listen-zk", "", "host:port of the ZooKeeper-protocol listener (default: off); see docs/zookeeper.md")
	fs.StringVar(&o.whitelist, "zk-4lw-whitelist", strings.Join(zkserver.DefaultFourLetterWords, ","),
		"four-letter words the ZooKeeper port answers, comma-separated (ruok, srvr, stat, mntr, conf, isro), or *")
	fs.IntVar(&o.perHost, "zk-max-client-cnxns", 0,
		"open ZooKeeper-port connections from one IP address, as ZooKeeper's maxClientCnxns (0: no cap but --max-connections)")
}

func (o *zkOptions) validate() error {
	if o.addr != "" {
		if err := checkHostPort(o.addr, true); err != nil {
			return fmt.Errorf("--listen-zk %q: %w", o.addr, err)
		}
	}
	if o.perHost < 0 {
		return fmt.Errorf("--zk-max-client-cnxns %d: want 0 (no cap) or more", o.perHost)
	}
	words, err := zkserver.ParseFourLetterWords(o.whitelist)
	if err != nil {
		return fmt.Errorf("--zk-4lw-whitelist %q: %w", o.whitelist, err)
	}
	o.words = words
	return nil
}

// zkListener is the running ZooKeeper listener, or nil when it is off.
type zkListener struct {
	l    *zkserver.Listener
	errc chan error
}

// listenZK binds the ZooKeeper port (before the server recovers, so that a
// port clash fails fast, as for the client port).
func listenZK(o zkOptions) (net.Listener, error) {
	if o.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("listen for ZooKeeper clients: %w", err)
	}
	return ln, nil
}

// serveZK starts serving s on ln (nil: the listener is off). The port
// holds at most maxConns connections (--max-connections, which caps each
// client listener).
func serveZK(ln net.Listener, s *server.Server, o zkOptions, maxConns int, logger *slog.Logger) *zkListener {
	if ln == nil {
		return &zkListener{errc: make(chan error)}
	}
	cfg := zkserver.Config{FourLetterWords: o.words, Addr: ln.Addr().String(), Logger: logger,
		MaxConnections: maxConns, MaxConnectionsPerHost: o.perHost}
	z := &zkListener{l: zkserver.New(s, cfg), errc: make(chan error, 1)}
	go func() { z.errc <- z.l.Serve(ln) }()
	logger.Info("serving the ZooKeeper protocol", "zk", ln.Addr().String())
	return z
}

// close stops the listener, if it runs.
func (z *zkListener) close() {
	if z.l != nil {
		_ = z.l.Close()
	}
}

// failed returns the listener's serve error channel (never ready when off).
func (z *zkListener) failed() <-chan error { return z.errc }
