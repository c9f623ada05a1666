package httpapi

import (
	"context"
	"net/http"

	"github.com/latch-io/latch/internal/tlsconfig"
)

// Caller is who sent a request, as far as the connection proves it. The
// authorization step checks it at one choke point; today it only carries
// the identity.
type Caller struct {
	// CertName is the subject common name of the client certificate the
	// TLS handshake verified against --trusted-ca-file; "" without one.
	CertName string
}

// callerKey is the context key of a request's Caller.
type callerKey struct{}

// CallerFrom returns the Caller of a request's context, and whether the
// request carried one (every request the Handler serves does).
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// withCaller returns r with its Caller in its context.
func withCaller(r *http.Request) *http.Request {
	var c Caller
	if name, ok := tlsconfig.Identity(r.TLS); ok {
		c.CertName = name
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}
