package client

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// Config says how a Client reaches the cluster. Only Endpoints is required;
// every zero duration or count takes the default named beside it.
type Config struct {
	// Endpoints are the client URLs of the cluster's servers, such as
	// "http://127.0.0.1:2379". A bare "host:port" means http.
	Endpoints []string
	// Token, when set, is sent as "Authorization: Bearer" on every request
	// (see Client.Login); a server with auth enabled needs it or a client
	// certificate naming a user.
	Token string
	// DialTimeout bounds the TCP (and TLS) connection set-up. Default 2s.
	DialTimeout time.Duration
	// RequestTimeout bounds one attempt of one request; a request retried on
	// another server gets a fresh RequestTimeout. Default 5s.
	RequestTimeout time.Duration
	// MaxAttempts bounds how many times one call is sent. Default 8.
	MaxAttempts int
	// BackoffBase is the delay before the first retry; each further retry
	// doubles it up to BackoffMax. Half of each delay is random. Defaults
	// 20ms and 1s.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// DownTime is how long a server that failed is avoided while another
	// one is thought to be healthy. Default 1s.
	DownTime time.Duration
	// NotifyJitter bounds the random delay a Watcher waits before handing
	// each notification to its reader, so that a change to a key the whole
	// fleet watches does not make every client re-read and re-watch in the
	// same millisecond (docs/design.md, watch herds). Default 50ms; a
	// negative value turns it off. A watch may override it (WatchJitter).
	NotifyJitter time.Duration
	// ReconnectJitter bounds the random delay before a session's event
	// stream reconnects after it ended, so that a server crash or a
	// partition heal does not reconnect every client at once (bottleneck 5).
	// Later attempts back off like requests. Default 200ms.
	ReconnectJitter time.Duration
	// TLS, when set, is used for https endpoints (LoadTLS builds one from
	// PEM files); an https endpoint without it trusts the system's roots.
	// Leader hints keep the scheme the server advertises.
	TLS *tls.Config
	// Transport, when set, replaces the client's own tuned transport; share
	// one between many Clients to share their connection pools.
	Transport http.RoundTripper
	// Clock, when set, paces session keepalives and judges their answers
	// in place of the real clock: fault tests give a client a clock that
	// runs slow or fast (request timeouts and retries keep real time).
	Clock Clock
}

// Defaults of Config.
const (
	DefaultDialTimeout     = 2 * time.Second
	DefaultRequestTimeout  = 5 * time.Second
	DefaultMaxAttempts     = 8
	DefaultBackoffBase     = 20 * time.Millisecond
	DefaultBackoffMax      = time.Second
	DefaultDownTime        = time.Second
	DefaultNotifyJitter    = 50 * time.Millisecond
	DefaultReconnectJitter = 200 * time.Millisecond
)

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	setDuration(&cfg.DialTimeout, DefaultDialTimeout)
	setDuration(&cfg.RequestTimeout, DefaultRequestTimeout)
	setDuration(&cfg.BackoffBase, DefaultBackoffBase)
	setDuration(&cfg.BackoffMax, DefaultBackoffMax)
	setDuration(&cfg.DownTime, DefaultDownTime)
	setJitter(&cfg.NotifyJitter, DefaultNotifyJitter)
	setJitter(&cfg.ReconnectJitter, DefaultReconnectJitter)
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	return cfg
}

// setJitter sets a zero jitter to def and a negative one (off) to zero.
func setJitter(d *time.Duration, def time.Duration) {
	switch {
	case *d == 0:
		*d = def
	case *d < 0:
		*d = 0
	}
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// NewTransport returns the HTTP/1.1 keep-alive transport a Client uses by
// default: enough idle connections per server for hundreds of concurrent
// callers, no compression (bodies are small JSON), no HTTP/2.
func NewTransport(cfg Config) *http.Transport {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       cfg.TLS,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: 0,
	}
}
