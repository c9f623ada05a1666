package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs test certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded: the trusted CA bundle.
	PEM []byte
}

// NewCA returns a fresh self-signed CA named name, valid for a day around now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"latch tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testcerts: create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: parse CA %s: %v", name, err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// WriteCA writes the CA certificate to dir/name and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	writeFile(t, path, ca.PEM)
	return path
}

// Usage says what a certificate may be used for.
type Usage int

// Usages of Issue.
const (
	Server Usage             = 1 << iota // TLS server authentication
	Client                               // TLS client authentication
	Peer   = Server | Client             // a cluster member: it both accepts and dials
)

// Options adjust a certificate; zero fields take the defaults named.
type Options struct {
	// Hosts are the IP addresses and DNS names the certificate names;
	// default 127.0.0.1 and localhost.
	Hosts []string
	// NotBefore and NotAfter bound its validity; default an hour ago to a
	// day from now.
	NotBefore, NotAfter time.Time
}

// Cert is an issued certificate and its key, PEM-encoded.
type Cert struct {
	Leaf    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a certificate for commonName with the given usage.
func (ca *CA) Issue(t testing.TB, commonName string, usage Usage, opts Options) *Cert {
	t.Helper()
	if len(opts.Hosts) == 0 {
		opts.Hosts = []string{"127.0.0.1", "localhost"}
	}
	if opts.NotBefore.IsZero() {
		opts.NotBefore = time.Now().Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = time.Now().Add(24 * time.Hour)
	}
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    opts.NotBefore,
		NotAfter:     opts.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if usage&Server != 0 {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if usage&Client != 0 {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, host := range opts.Hosts {
		if ip := net.ParseIP(host); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", commonName, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: parse %s: %v", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: marshal key of %s: %v", commonName, err)
	}
	return &Cert{
		Leaf:    leaf,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// Write writes the certificate to dir/base.crt and its key to dir/base.key
// and returns both paths.
func (c *Cert) Write(t testing.TB, dir, base string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	writeFile(t, certFile, c.CertPEM)
	writeFile(t, keyFile, c.KeyPEM)
	return certFile, keyFile
}

// TLS returns the certificate as a tls.Certificate, for in-process clients.
func (c *Cert) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatalf("testcerts: key pair: %v", err)
	}
	return pair
}

// writeFile replaces path atomically (a temporary file renamed over it), as
// a careful operator rotating certificates does.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("testcerts: write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testcerts: rename to %s: %v", path, err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatalf("testcerts: serial: %v", err)
	}
	return n
}
