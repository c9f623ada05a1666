package httpapi

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/tlsconfig"
)

// TestCallerCarriesTheClientCertificateName: through the Server's TLS
// listener (as latchd serves it), a request with a verified client
// certificate has its common name in its context; one without a
// certificate has an empty Caller.
func TestCallerCarriesTheClientCertificateName(t *testing.T) {
	ca := testcerts.NewCA(t, "client CA")
	seen := make(chan Caller, 2)
	server := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := CallerFrom(withCaller(r).Context())
		if !ok {
			t.Error("no Caller in the request's context")
		}
		seen <- c
	}), Limits{}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := &tls.Config{
		Certificates: []tls.Certificate{ca.Issue(t, "server", testcerts.Server, testcerts.Options{}).TLS(t)},
		ClientCAs:    ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven,
	}
	go server.Serve(tlsconfig.WrapListener(ln, serverTLS))
	defer server.Close()
	url := "https://" + ln.Addr().String() + "/"

	get := func(cert *testcerts.Cert) Caller {
		t.Helper()
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return <-seen
	}
	if c := get(ca.Issue(t, "alice", testcerts.Client, testcerts.Options{})); c.CertName != "alice" {
		t.Errorf("Caller %+v; want CertName alice", c)
	}
	if c := get(nil); c.CertName != "" {
		t.Errorf("Caller %+v without a certificate; want none", c)
	}
	if _, ok := CallerFrom(httptest.NewRequest("GET", "/", nil).Context()); ok {
		t.Error("CallerFrom found a Caller in a bare context")
	}
}
