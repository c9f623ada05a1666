// Package tlsconfig builds the *tls.Config of latchd's listening ports (the
// client port, the peer port and the ZooKeeper-protocol port) and of the
// peer transport's dials, from PEM files named on the command line.
//
// A Source owns one port's certificate, key and trusted CA bundle. It checks
// the files' stat (identity, size, modification time) on every handshake and
// reloads them when they changed, so certificates rotate without a restart.
//
// latchd builds one Source per port from its flags; a listener of the
// client API's kind (the ZooKeeper-protocol port shares the client port's
// certificates) secures itself with WrapListener(ln, source.ServerConfig()),
// and a handshake's verified client name is Identity(&state).
//
// Invariants:
//   - A Source always serves the last good certificate and CA pool: a new
//     file that does not parse, or a key that does not match its
//     certificate, keeps the old ones and is logged once per change.
//   - No config this package builds accepts a TLS version below 1.2.
//   - A server config that verifies client certificates verifies them
//     against the Source's own CA bundle only (never the system roots), so
//     the peer port trusts only the peer CA.
//   - A client certificate's identity (its subject common name) is reported
//     only from a verified chain.
package tlsconfig
