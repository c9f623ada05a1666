package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the PEM files a client uses for https endpoints, as
// latchctl's --cacert, --cert and --key name them. Every field is optional;
// CertFile and KeyFile go together.
type TLSFiles struct {
	CAFile   string // CA bundle the servers' certificates must chain to (default: the system's roots)
	CertFile string // client certificate, for servers that require one (--client-cert-auth)
	KeyFile  string // its private key
}

// LoadTLS reads files into a TLS config for Config.TLS (TLS 1.2 at least).
func LoadTLS(files TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files.CAFile != "" {
		data, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA bundle: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("client: CA bundle %s holds no PEM certificate", files.CAFile)
		}
	}
	switch {
	case files.CertFile == "" && files.KeyFile == "":
	case files.CertFile == "" || files.KeyFile == "":
		return nil, errors.New("client: a client certificate needs both its certificate file and its key file")
	default:
		pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
