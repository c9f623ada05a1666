package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
)

// Client is a handle on a latch cluster. It is safe for concurrent use by
// any number of goroutines; share one per process.
type Client struct {
	cfg       Config
	http      *http.Client
	endpoints *endpointPool
	clock     clock // drives session keepalives; retries use real time
	// keepalives batches the heartbeats of this client's sessions.
	keepalives keepaliveSet
	// ownTransport is the transport New built, closed by Close; nil when
	// the caller supplied Config.Transport.
	ownTransport *http.Transport
	// maxIndex is the highest X-Latch-Index seen on any reply (of shard 0,
	// on a cluster of several shards). It only grows.
	maxIndex atomic.Uint64
	// positions are the highest indexes seen per shard, on a cluster of
	// several shards.
	positions shardPositions
	// jitter returns a random delay in [0, bound) (0 for bound <= 0); tests
	// replace it to observe the herd defences.
	jitter func(bound time.Duration) time.Duration
}

// New returns a Client for the cluster at cfg.Endpoints. It does not contact
// the cluster: the first request picks a reachable server.
func New(cfg Config) (*Client, error) {
	var clk clock = realClock{}
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	return newClient(cfg, clk, rand.IntN)
}

// newClient is New with the clock and the choice of first endpoint injected.
func newClient(cfg Config, clk clock, startAt func(n int) int) (*Client, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("client: Config.Endpoints is empty")
	}
	pool, err := newEndpointPool(cfg.Endpoints, startAt(len(cfg.Endpoints)), cfg.DownTime, time.Now)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, endpoints: pool, clock: clk, jitter: randomJitter}
	transport := cfg.Transport
	if transport == nil {
		c.ownTransport = NewTransport(cfg)
		transport = c.ownTransport
	}
	c.http = &http.Client{Transport: transport, CheckRedirect: noRedirects}
	return c, nil
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Close releases the client's idle connections. Sessions made by this client
// should be closed first.
func (c *Client) Close() error {
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections()
	}
	return nil
}

// Endpoints returns the server URLs the client knows, leader hints included.
func (c *Client) Endpoints() []string { return c.endpoints.list() }

// LastIndex returns the highest X-Latch-Index the client has seen; on a
// cluster of several shards, the highest of shard 0 (the client sends every
// shard's as min_index).
func (c *Client) LastIndex() uint64 { return c.maxIndex.Load() }

// observeIndex raises maxIndex to index if it is higher.
func (c *Client) observeIndex(index uint64) {
	for {
		seen := c.maxIndex.Load()
		if index <= seen || c.maxIndex.CompareAndSwap(seen, index) {
			return
		}
	}
}

// retryPolicy says which failures a call may be resent after.
type retryPolicy int

const (
	// retrySafe: reads and session-scoped writes; resent after any
	// transport error, 503 or 429.
	retrySafe retryPolicy = iota
	// retryIfNotSent: writes without a session; resent only when no server
	// saw them (dial failure) or a server refused them with 429.
	retryIfNotSent
)

// call is one logical request. do sends it, possibly several times.
type call struct {
	method string
	path   string // URL path, e.g. "/v1/kv/a/b" (unescaped)
	query  url.Values
	body   []byte // JSON body, nil for none
	policy retryPolicy
	// idempotencyKey, when set, lets the transport resend the request on a
	// pooled connection that turned out to be dead.
	idempotencyKey string
	// endpoint, when set, pins the call to one server: no failover.
	endpoint string
	out      any // decoded from a 2xx JSON body when non-nil
	// errOut, when non-nil, is also decoded from an error reply's body, for
	// replies that carry fields beside the error envelope (lock_not_held).
	errOut any
	// wait is how long the server may legitimately hold the request before
	// answering (a lock acquire's wait_ms); it extends the attempt timeout.
	wait time.Duration
	// stream, when set, makes the call a long-lived stream: once a 2xx reply
	// arrives, stream consumes its body and do returns what stream returns,
	// without retrying. RequestTimeout then bounds only the wait for the
	// reply's headers.
	stream func(body io.Reader) error
}

// postSafe sends in as the JSON body of a POST to path that is retried
// through failover (retrySafe), and returns the decoded 2xx reply.
func postSafe[Reply any](ctx context.Context, c *Client, path string, in any) (*Reply, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	var reply Reply
	if err := c.do(ctx, &call{method: "POST", path: path, body: body, policy: retrySafe, out: &reply}); err != nil {
		return nil, err
	}
	return &reply, nil
}

// sessionPostSafe is postSafe for a call on session s's behalf: a reply
// saying the session expired ends s.
func sessionPostSafe[Reply any](ctx context.Context, s *Session, path string, in any) (*Reply, error) {
	reply, err := postSafe[Reply](ctx, s.client, path, in)
	s.noteWriteError(err)
	return reply, err
}

// streamEnded wraps what a call's stream function returned, so that do
// reports it instead of retrying: the stream had been established.
type streamEnded struct{ err error }

func (e *streamEnded) Error() string { return fmt.Sprintf("stream ended: %v", e.err) }
func (e *streamEnded) Unwrap() error { return e.err }

// do sends cl until it succeeds, fails for good, runs out of attempts or ctx
// ends. It is the only place that retries.
func (c *Client) do(ctx context.Context, cl *call) error {
	var lastErr error
	attempts := c.cfg.MaxAttempts
	if cl.endpoint != "" {
		attempts = 1 // a pinned call reports on that one server
	}
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			if err := c.sleep(ctx, c.backoff(attempt)); err != nil {
				return fmt.Errorf("client: %s %s: %w (last error: %w)", cl.method, cl.path, err, lastErr)
			}
		}
		endpoint := cl.endpoint
		if endpoint == "" {
			endpoint = c.endpoints.pick()
		}
		err := c.send(ctx, endpoint, cl)
		if err == nil {
			return nil
		}
		var ended *streamEnded
		if errors.As(err, &ended) {
			return ended.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s %s: %w", cl.method, cl.path, ctx.Err())
		}
		retry, final := c.classify(endpoint, cl, err)
		if !retry {
			return final
		}
		lastErr = err
	}
	return fmt.Errorf("%w (gave up after %d attempts; last error: %w)",
		api.Errorf(api.CodeUnavailable, "%s %s: no server answered", cl.method, cl.path), attempts, lastErr)
}

// classify decides whether err from endpoint is worth another attempt and
// updates the endpoint pool. When it is not, final is the error to return.
func (c *Client) classify(endpoint string, cl *call, err error) (retry bool, final error) {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		switch apiErr.Code {
		case api.CodeOverloaded:
			return true, nil
		case api.CodeUnavailable:
			if cl.endpoint == "" {
				if apiErr.LeaderHint == "" || !c.endpoints.prefer(apiErr.LeaderHint) {
					c.endpoints.markDown(endpoint)
				}
			}
			return cl.policy == retrySafe, apiErr
		}
		return false, apiErr
	}
	if cl.endpoint == "" {
		c.endpoints.markDown(endpoint)
	}
	if cl.policy == retrySafe || notSent(err) {
		return true, nil
	}
	return false, fmt.Errorf("%w: %w", api.Errorf(api.CodeUnavailable,
		"%s %s: outcome unknown: the server may or may not have applied it", cl.method, cl.path), err)
}

// notSent reports whether err proves the request never reached a server.
func notSent(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// backoff returns the delay before attempt (>= 1): BackoffBase doubled per
// attempt up to BackoffMax, the upper half of it random.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffBase << min(attempt-1, 30)
	if d > c.cfg.BackoffMax || d <= 0 {
		d = c.cfg.BackoffMax
	}
	half := d / 2
	return half + rand.N(half+1)
}

// randomJitter returns a uniformly random delay in [0, bound).
func randomJitter(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	return rand.N(bound)
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// send makes one attempt of cl against endpoint. A non-2xx reply becomes an
// *api.Error; anything else that fails is a transport error.
func (c *Client) send(ctx context.Context, endpoint string, cl *call) error {
	if cl.stream != nil {
		return c.sendStream(ctx, endpoint, cl)
	}
	attemptCtx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout+cl.wait)
	defer cancel()
	req, err := c.newRequest(attemptCtx, endpoint, cl)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer drainAndClose(resp.Body)
	c.observeReplyIndex(resp)
	if resp.StatusCode/100 != 2 {
		return decodeError(resp, cl.errOut)
	}
	if cl.out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(cl.out); err != nil {
		return fmt.Errorf("client: decode reply of %s %s from %s: %w", cl.method, cl.path, endpoint, err)
	}
	return nil
}

// sendStream makes one attempt of a streaming call: RequestTimeout bounds
// the wait for headers, then cl.stream reads the body until it ends or ctx
// does. The body is closed without draining it.
func (c *Client) sendStream(ctx context.Context, endpoint string, cl *call) error {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	headerTimer := time.AfterFunc(c.cfg.RequestTimeout, cancel)
	req, err := c.newRequest(streamCtx, endpoint, cl)
	if err != nil {
		headerTimer.Stop()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if !headerTimer.Stop() && err == nil {
		err = fmt.Errorf("client: no reply headers from %s within %v", endpoint, c.cfg.RequestTimeout)
		_ = resp.Body.Close()
	}
	if err != nil {
		return err
	}
	c.observeReplyIndex(resp)
	if resp.StatusCode/100 != 2 {
		defer drainAndClose(resp.Body)
		return decodeError(resp, cl.errOut)
	}
	defer resp.Body.Close()
	return &streamEnded{err: cl.stream(resp.Body)}
}

// observeReplyIndex raises the client's index to the reply's X-Latch-Index:
// of the shard the reply names (X-Latch-Shard), of shard 0 without
// shards; a reply of a sharded cluster that names no shard is not used.
func (c *Client) observeReplyIndex(resp *http.Response) {
	index, err := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
	if err != nil {
		return
	}
	if resp.Header.Get(api.HeaderShards) == "" {
		c.observeShardIndex(0, index)
		return
	}
	c.positions.markSharded()
	if shard, err := strconv.Atoi(resp.Header.Get(api.HeaderShard)); err == nil && shard >= 0 {
		c.observeShardIndex(shard, index)
	}
}

func (c *Client) newRequest(ctx context.Context, endpoint string, cl *call) (*http.Request, error) {
	target := endpoint + (&url.URL{Path: cl.path}).EscapedPath()
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, target, body)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "build request: %v", err)
	}
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", cl.idempotencyKey)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	return req, nil
}

// maxErrorBody bounds how much of an error reply is read.
const maxErrorBody = 64 << 10

// decodeError turns a non-2xx reply into an *api.Error, also when its body
// is not the JSON error envelope (a proxy's or a 404 of an unknown route).
// When extra is not nil the body is decoded into it too.
func decodeError(resp *http.Response, extra any) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if extra != nil {
		_ = json.Unmarshal(raw, extra)
	}
	var envelope api.ErrorBody
	if err := json.Unmarshal(raw, &envelope); err == nil && envelope.Error.Code != "" {
		e := envelope.Error
		return &e
	}
	return &api.Error{Code: codeForStatus(resp.StatusCode),
		Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))}
}

// codeForStatus maps an HTTP status without an error body to an api code.
func codeForStatus(status int) api.Code {
	for _, code := range []api.Code{api.CodeInvalidArgument, api.CodeNotFound, api.CodePreconditionFailed,
		api.CodeSessionExpired, api.CodeTooLarge, api.CodeOverloaded, api.CodeUnavailable,
		api.CodeUnauthenticated, api.CodePermissionDenied, api.CodeQuotaExceeded} {
		if code.Status() == status {
			return code
		}
	}
	if status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxErrorBody))
	_ = body.Close()
}

// Clock is the time source of session keepalives (Config.Clock).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// clock is Clock as the package's tests inject a fake.
type clock = Clock

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
