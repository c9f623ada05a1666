package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"

	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/tlsconfig"
)

// securityFlags are the transport-security flags, named as etcd names them.
type securityFlags struct {
	client, peer   tlsconfig.Files
	minVersionName string
	minVersion     uint16 // parsed from minVersionName by validate
	insecureListen bool
}

func (s *securityFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.client.CertFile, "cert-file", "", "PEM certificate of the client port: serve the client API over HTTPS (with --key-file)")
	fs.StringVar(&s.client.KeyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&s.client.TrustedCAFile, "trusted-ca-file", "", "PEM CA bundle client certificates must chain to")
	fs.BoolVar(&s.client.ClientCertAuth, "client-cert-auth", false, "require every client to present a certificate from --trusted-ca-file")
	fs.StringVar(&s.peer.CertFile, "peer-cert-file", "", "PEM certificate of this member on the peer port, for both server and client authentication")
	fs.StringVar(&s.peer.KeyFile, "peer-key-file", "", "PEM private key of --peer-cert-file")
	fs.StringVar(&s.peer.TrustedCAFile, "peer-trusted-ca-file", "", "PEM CA bundle of the peer CA: the other members' certificates must chain to it")
	fs.BoolVar(&s.peer.ClientCertAuth, "peer-client-cert-auth", true, "require members dialing the peer port to present a certificate from --peer-trusted-ca-file")
	fs.StringVar(&s.minVersionName, "tls-min-version", "1.2", "oldest TLS version accepted on every port: 1.2 or 1.3")
	fs.BoolVar(&s.insecureListen, "insecure-listen", false, "allow the client or peer port on a non-loopback address without TLS (clear text: anyone who reaches it can read and write everything)")
}

// validate checks the security flags against the listen addresses.
func (s *securityFlags) validate(cfg *server.Config) error {
	version, err := tlsconfig.ParseMinVersion(s.minVersionName)
	if err != nil {
		return fmt.Errorf("--tls-min-version %q: %w", s.minVersionName, err)
	}
	s.minVersion = version
	if err := s.client.Check(""); err != nil {
		return err
	}
	if s.client.ClientCertAuth && !s.client.Enabled() {
		return errors.New("--client-cert-auth needs --cert-file and --key-file (client certificates are checked in the TLS handshake)")
	}
	if s.peer.CertFile != "" && s.peer.KeyFile != "" && s.peer.TrustedCAFile == "" {
		return errors.New("--peer-trusted-ca-file is required with --peer-cert-file: members verify each other's certificates against it")
	}
	if err := s.peer.Check("peer-"); err != nil {
		return err
	}
	if s.client.Enabled() && cfg.AdvertiseClientURL != "" {
		if u, err := url.Parse(cfg.AdvertiseClientURL); err == nil && u.Scheme != "https" {
			return fmt.Errorf("--advertise-client %q: the client port serves TLS (--cert-file), so want an https:// URL", cfg.AdvertiseClientURL)
		}
	}
	if s.insecureListen {
		return nil
	}
	if !s.client.Enabled() && !isLoopback(cfg.ClientAddr) {
		return fmt.Errorf("--listen-client %q is not a loopback address and the client port has no TLS (--cert-file, --key-file): "+
			"refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it", cfg.ClientAddr)
	}
	if !s.peer.Enabled() && !isLoopback(cfg.PeerAddr) {
		return fmt.Errorf("--listen-peer %q is not a loopback address and the peer port has no TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file): "+
			"refusing to replicate in clear text; give certificates, or --insecure-listen to allow it", cfg.PeerAddr)
	}
	return nil
}

// checkClearText refuses a client-facing listener other than the client
// port (flag, at addr; empty: off) on a non-loopback address without TLS,
// unless --insecure-listen: it serves with the client port's certificates.
func (s *securityFlags) checkClearText(flag, addr string) error {
	if addr == "" || s.insecureListen || s.client.Enabled() || isLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%s %q is not a loopback address and the client port has no TLS (--cert-file, --key-file): "+
		"refusing to serve clients in clear text; give certificates, or --insecure-listen to allow it", flag, addr)
}

// isLoopback reports whether host:port listens on loopback only: a
// loopback IP address or "localhost". Any other name, and an empty host
// (every interface), is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apply loads the certificates and sets up cfg's peer TLS; it returns the
// client port's TLS config, or nil without TLS there.
func (s *securityFlags) apply(cfg *server.Config, logger *slog.Logger) (*tls.Config, error) {
	if s.peer.Enabled() {
		peer, err := tlsconfig.NewSource(s.peer, s.minVersion, logger.With("port", "peer"))
		if err != nil {
			return nil, fmt.Errorf("peer TLS: %w", err)
		}
		if !s.peer.ClientCertAuth {
			logger.Warn("--peer-client-cert-auth=false: anyone who reaches the peer port can join replication; members authenticate only the listener")
		}
		cfg.PeerServerTLS, cfg.PeerClientTLS = peer.ServerConfig(), peer.ClientConfig
	}
	if !s.client.Enabled() {
		return nil, nil
	}
	client, err := tlsconfig.NewSource(s.client, s.minVersion, logger.With("port", "client"))
	if err != nil {
		return nil, fmt.Errorf("client TLS: %w", err)
	}
	cfg.ClientTLS = true
	return client.ServerConfig(), nil
}
