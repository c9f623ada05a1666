package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
)

// Files names one port's PEM files and whether it requires client certificates.
type Files struct {
	CertFile      string // the port's certificate chain (PEM)
	KeyFile       string // its private key (PEM)
	TrustedCAFile string // CA bundle (PEM) that client (and, when dialing, server) certificates must chain to
	// ClientCertAuth requires every client to present a certificate that
	// chains to TrustedCAFile. Without it a certificate is verified if given.
	ClientCertAuth bool
}

// Enabled reports whether TLS is configured for the port.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// Check says what is wrong with the combination of files, or nil. flagPrefix
// ("" or "peer-") names the flags in the message.
func (f Files) Check(flagPrefix string) error {
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return fmt.Errorf("--%scert-file and --%skey-file go together: give both or neither", flagPrefix, flagPrefix)
	case !f.Enabled() && f.TrustedCAFile != "":
		return fmt.Errorf("--%strusted-ca-file needs --%scert-file and --%skey-file", flagPrefix, flagPrefix, flagPrefix)
	case f.ClientCertAuth && f.TrustedCAFile == "" && f.Enabled():
		return fmt.Errorf("--%sclient-cert-auth needs --%strusted-ca-file (the CA client certificates must chain to)", flagPrefix, flagPrefix)
	}
	return nil
}

// ParseMinVersion turns --tls-min-version's value into a tls version: 1.2
// or 1.3; older versions are refused.
func ParseMinVersion(s string) (uint16, error) {
	switch s {
	case "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	case "1.0", "1.1":
		return 0, fmt.Errorf("TLS %s is refused: it is deprecated (RFC 8996); want 1.2 or 1.3", s)
	}
	return 0, errors.New("want 1.2 or 1.3")
}

// Source serves one port's certificate and CA pool, reloading them when
// their files change. It is safe for concurrent use.
type Source struct {
	files      Files
	minVersion uint16
	logger     *slog.Logger

	mu      sync.Mutex // guards the fields below
	cert    *tls.Certificate
	pool    *x509.CertPool // nil without TrustedCAFile
	stamps  []os.FileInfo  // of the files behind cert and pool, as last loaded
	refused []os.FileInfo  // of the files last found unusable (not retried until they change)
	// unreadable: a file could not be stat'ed at the last look (logged once).
	unreadable bool
}

// NewSource loads files now and fails if they are unusable. minVersion is
// tls.VersionTLS12 or tls.VersionTLS13 (0 means 1.2).
func NewSource(files Files, minVersion uint16, logger *slog.Logger) (*Source, error) {
	if !files.Enabled() || files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tlsconfig: a certificate file and a key file are required")
	}
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	if minVersion < tls.VersionTLS12 {
		return nil, errors.New("tlsconfig: TLS versions below 1.2 are refused")
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Source{files: files, minVersion: minVersion, logger: logger}
	stamps, err := s.stat()
	if err != nil {
		return nil, err
	}
	if err := s.load(stamps); err != nil {
		return nil, err
	}
	return s, nil
}

// paths lists the files the Source reads, the CA bundle last if any.
func (s *Source) paths() []string {
	paths := []string{s.files.CertFile, s.files.KeyFile}
	if s.files.TrustedCAFile != "" {
		paths = append(paths, s.files.TrustedCAFile)
	}
	return paths
}

func (s *Source) stat() ([]os.FileInfo, error) {
	var stamps []os.FileInfo
	for _, path := range s.paths() {
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: %w", err)
		}
		stamps = append(stamps, info)
	}
	return stamps, nil
}

// load reads every file and, if all are usable, replaces the certificate and
// pool; stamps are the files' stat taken before reading.
func (s *Source) load(stamps []os.FileInfo) error {
	cert, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
	if err != nil {
		return fmt.Errorf("tlsconfig: load %s and %s: %w", s.files.CertFile, s.files.KeyFile, err)
	}
	var pool *x509.CertPool
	if s.files.TrustedCAFile != "" {
		if pool, err = loadPool(s.files.TrustedCAFile); err != nil {
			return err
		}
	}
	s.cert, s.pool, s.stamps, s.refused = &cert, pool, stamps, nil
	return nil
}

// loadPool reads a PEM CA bundle.
func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("tlsconfig: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// current returns the certificate and pool to use now, reloading them
// first if a file changed since they were loaded. A change that cannot be
// loaded is logged once and the previous ones are kept.
func (s *Source) current() (*tls.Certificate, *x509.CertPool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamps, err := s.stat()
	if err != nil {
		if !s.unreadable {
			s.logger.Error("TLS files unreadable; keeping the loaded certificate", "err", err)
			s.unreadable = true
		}
		return s.cert, s.pool
	}
	s.unreadable = false
	if sameStamps(stamps, s.stamps) || sameStamps(stamps, s.refused) {
		return s.cert, s.pool
	}
	if err := s.load(stamps); err != nil {
		s.logger.Error("new TLS files refused; keeping the loaded certificate", "err", err)
		s.refused = stamps
	} else {
		s.logger.Info("TLS files reloaded", "cert", s.files.CertFile)
	}
	return s.cert, s.pool
}

// sameStamps reports whether two stats of the same files show no change.
func sameStamps(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return false
		}
	}
	return true
}

// ServerConfig returns the config of a listening port: every handshake
// gets the current certificate and CA pool.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: s.minVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := s.current()
			cfg := &tls.Config{MinVersion: s.minVersion, Certificates: []tls.Certificate{*cert}, ClientCAs: pool}
			switch {
			case s.files.ClientCertAuth:
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
			case pool != nil:
				cfg.ClientAuth = tls.VerifyClientCertIfGiven
			}
			return cfg, nil
		},
	}
}

// ClientConfig returns the config of one dial to serverName (a host name or
// IP address the server's certificate must name): the current certificate
// is presented and the server must chain to the current CA pool.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	cert, pool := s.current()
	return &tls.Config{
		MinVersion:   s.minVersion,
		ServerName:   serverName,
		RootCAs:      pool,
		Certificates: []tls.Certificate{*cert},
	}
}

// WrapListener returns a listener whose connections speak TLS with cfg
// (typically a Source's ServerConfig). Closing it closes inner.
func WrapListener(inner net.Listener, cfg *tls.Config) net.Listener {
	return tls.NewListener(inner, cfg)
}

// Identity returns the subject common name of the client certificate that
// state's handshake verified, and whether there was one.
func Identity(state *tls.ConnectionState) (string, bool) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", false
	}
	return state.VerifiedChains[0][0].Subject.CommonName, true
}
