package check

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/latch-io/latch/api"
)

// HTTPClient talks to one member at a time: no retries, no failover, so a
// workload sees exactly what each member answers.
var HTTPClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
}

// ErrTransport marks an error where no HTTP reply arrived: the request may
// or may not have been applied.
var ErrTransport = errors.New("check: no reply")

// ErrNotSent marks a request whose connection could not be made: it
// certainly reached no server.
var ErrNotSent = errors.New("check: not sent")

// Call sends one JSON request to base+path with HTTPClient and decodes a
// 200 reply into out. An error reply comes back as *api.Error; a lost
// request wraps ErrTransport.
func Call(ctx context.Context, method, base, path string, query url.Values, in, out any) error {
	return CallWith(ctx, HTTPClient, method, base, path, query, in, out)
}

// CallWith is Call sent with client.
func CallWith(ctx context.Context, client *http.Client, method, base, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	target := base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return fmt.Errorf("%w: %s %s: %w", ErrNotSent, method, target, err)
		}
		return fmt.Errorf("%w: %s %s: %v", ErrTransport, method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrTransport, method, target, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("%s %s: status %d: %s", method, target, resp.StatusCode, data)
		}
		return &e.Error
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Code returns the api error code of err, or "".
func Code(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// NewHTTPClient returns a client like HTTPClient that uses tlsConfig for
// https members (nil: the system's roots) and, when token is not "",
// sends it as "Authorization: Bearer" on every request: how a Run checks
// a cluster with TLS and auth on (Options.HTTP).
func NewHTTPClient(tlsConfig *tls.Config, token string) *http.Client {
	var transport http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, TLSClientConfig: tlsConfig}
	if token != "" {
		transport = bearer{token: token, next: transport}
	}
	return &http.Client{Transport: transport}
}

// bearer adds a bearer token to every request it sends.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}
