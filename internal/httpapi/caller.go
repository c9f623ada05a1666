package httpapi

import (
	"context"
	"crypto/tls"
	"net"
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

// tlsConnKey is the context key of a connection's *tls.Conn: Server's
// connections wrap the TLS connection (to enforce Limits on the plaintext),
// so the http.Server does not see it and leaves Request.TLS nil.
type tlsConnKey struct{}

// withTLSConn is the http.Server's ConnContext: it keeps the connection's
// *tls.Conn, if it has one, for withCaller.
func withTLSConn(ctx context.Context, c net.Conn) context.Context {
	if wrapped, ok := c.(*apiConn); ok {
		c = wrapped.Conn
	}
	if tlsConn, ok := c.(*tls.Conn); ok {
		return context.WithValue(ctx, tlsConnKey{}, tlsConn)
	}
	return ctx
}

// connectionState returns the TLS state of r's connection, or nil.
func connectionState(r *http.Request) *tls.ConnectionState {
	if r.TLS != nil {
		return r.TLS
	}
	if tlsConn, ok := r.Context().Value(tlsConnKey{}).(*tls.Conn); ok {
		state := tlsConn.ConnectionState() // complete: the request was read through it
		return &state
	}
	return nil
}

// withCaller returns r with its Caller in its context.
func withCaller(r *http.Request) *http.Request {
	var c Caller
	if name, ok := tlsconfig.Identity(connectionState(r)); ok {
		c.CertName = name
	}
	ctx := withCredentials(context.WithValue(r.Context(), callerKey{}, c), r, c)
	return r.WithContext(ctx) // one copy of the request, not one per value

}
