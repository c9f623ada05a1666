package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/client/recipe"
	"github.com/latch-io/latch/internal/clock"
)

// lockClientEnv carries a lock client process's configuration, a JSON
// lockClientConfig. The lockproc workload re-executes the test binary with
// it set, and chaos_test.go's TestMain then runs lockClientMain instead of
// the tests.
const lockClientEnv = "LATCH_CHAOS_LOCK_CLIENT"

// writerPIDHeader names, on every write to the guarded resource, the
// process that sent it; skewedHeader is "1" on the writes of a tenure
// during which the process's clock was skewed.
const (
	writerPIDHeader = "Latch-Chaos-Writer-Pid"
	skewedHeader    = "Latch-Chaos-Skewed"
)

// lockClientConfig is what a lock client process needs to know.
type lockClientConfig struct {
	Endpoints      []string      `json:"endpoints"`       // the members' client URLs
	Resource       string        `json:"resource"`        // URL of the guarded resource
	Lock           string        `json:"lock"`            // the lock's name
	SessionTimeout time.Duration `json:"session_timeout"` // of every session it opens
	Seed           uint64        `json:"seed"`            // of its work durations
	// Lifetime bounds the process: it exits after this long even if its
	// parent, which ends it by closing its stdin, did not.
	Lifetime time.Duration `json:"lifetime"`
	// TLS and Token are how it reaches a cluster with TLS and auth on: the
	// CA of the members' certificates, a client certificate, a login token.
	TLS   client.TLSFiles `json:"tls"`
	Token string          `json:"token"`
}

// Lines the parent writes to a lock client's stdin: "rate R" runs the
// client's clock (its keepalives and its work) at R times real time.
const rateCommand = "rate"

// errStaleRefused is a write the resource refused as stale (409): the lock
// has a newer holder.
var errStaleRefused = errors.New("chaos: write refused: stale fencing token")

// lockClientMain is the lock client process: it decodes its configuration
// from encoded and repeats acquire -> write -> work -> write -> release
// until its stdin closes or its lifetime passes. It returns the exit code.
func lockClientMain(encoded string) int {
	var cfg lockClientConfig
	if err := json.Unmarshal([]byte(encoded), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "lock client: bad %s: %v\n", lockClientEnv, err)
		return 2
	}
	skewed := clock.NewSkewed(clock.Real())
	c, err := newLockClientClient(cfg, skewed)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lock client: %v\n", err)
		return 2
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Lifetime)
	defer cancel()
	lc := &lockClient{
		cfg: cfg, client: c, http: &http.Client{}, clock: skewed,
		random: rand.New(rand.NewPCG(cfg.Seed, uint64(os.Getpid()))), pid: strconv.Itoa(os.Getpid()),
	}
	go func() {
		followCommands(os.Stdin, skewed, &lc.skews) // returns when the parent closes the pipe or dies
		cancel()
	}()
	fmt.Fprintf(os.Stderr, "lock client %s: seed %d, lock %s, session timeout %v\n", lc.pid, cfg.Seed, cfg.Lock, cfg.SessionTimeout)
	lc.run(ctx)
	fmt.Fprintf(os.Stderr, "lock client %s: %d rounds held, %d writes refused as stale, %d rounds failed\n", lc.pid, lc.held, lc.refused, lc.failed)
	return 0
}

// newLockClientClient returns the client of a lock client process, its
// keepalives paced by clk.
func newLockClientClient(cfg lockClientConfig, clk client.Clock) (*client.Client, error) {
	config := client.Config{Endpoints: cfg.Endpoints, Token: cfg.Token, Clock: clk}
	if cfg.TLS != (client.TLSFiles{}) {
		tlsConfig, err := client.LoadTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		config.TLS = tlsConfig
	}
	return client.New(config)
}

// followCommands applies the parent's commands read from in to clk until
// in ends, counting in skews each rate it sets other than 1.
func followCommands(in io.Reader, clk *clock.Skewed, skews *atomic.Uint64) {
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		var rate float64
		if _, err := fmt.Sscanf(lines.Text(), rateCommand+" %g", &rate); err != nil {
			fmt.Fprintf(os.Stderr, "lock client: bad command %q: %v\n", lines.Text(), err)
			continue
		}
		if err := clk.SetRate(rate); err != nil {
			fmt.Fprintf(os.Stderr, "lock client: %v\n", err)
			continue
		}
		if rate != 1 {
			skews.Add(1)
		}
		fmt.Fprintf(os.Stderr, "lock client %d: clock at %vx\n", os.Getpid(), rate)
	}
}

// lockClient is the loop of one lock client process; one goroutine runs it.
type lockClient struct {
	cfg     lockClientConfig
	client  *client.Client
	http    *http.Client
	clock   *clock.Skewed // of its keepalives and its work; the parent skews it
	skews   atomic.Uint64 // times the parent set clock's rate to other than 1
	random  *rand.Rand
	pid     string          // this process's, sent with every write
	session *client.Session // nil until opened, and after it ended

	held, refused, failed int // rounds that got the lock; stale refusals; rounds that did not get it
}

// run repeats rounds until ctx ends, then closes its session.
func (lc *lockClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := lc.round(ctx); err != nil && ctx.Err() == nil {
			lc.failed++
			if lc.failed <= 20 {
				fmt.Fprintf(os.Stderr, "lock client %s: %v\n", lc.pid, err)
			}
			lc.wait(ctx, 100*time.Millisecond)
		}
	}
	if lc.session != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = lc.session.Close(closeCtx)
	}
}

// round is one acquire -> write -> work -> write -> release. It does not
// look at the lock's Lost signal between its work and its second write, as
// a holder paused between that look and the write could not either: the
// guard, refusing a stale token, is what protects the resource.
func (lc *lockClient) round(ctx context.Context) error {
	s, err := lc.liveSession(ctx)
	if err != nil {
		return err
	}
	lock := recipe.NewLock(s, lc.cfg.Lock)
	acquireCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	token, err := lock.Acquire(acquireCtx)
	cancel()
	if err != nil {
		return err
	}
	lc.held++
	// A tenure is a skewed one if the clock ran skewed at any moment of it:
	// at its start, at its last write, or in between (a skew healed before
	// the last write still stretched the work past the session's end).
	skewsAtStart := lc.skews.Load()
	skewed := lc.clock.Rate() != 1
	err = lc.write(ctx, token, skewed)
	if err == nil {
		lc.wait(ctx, time.Duration(100+lc.random.IntN(300))*time.Millisecond) // the work
		err = lc.write(ctx, token, skewed || lc.clock.Rate() != 1 || lc.skews.Load() != skewsAtStart)
	}
	releaseCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = lock.Release(releaseCtx) // a lost lock is what the guard is for
	if errors.Is(err, errStaleRefused) {
		return nil // the expected outcome for a holder that stalled
	}
	return err
}

// liveSession returns the session, opening a new one when there is none or
// it ended (expired, or no heartbeat got through for a whole timeout).
func (lc *lockClient) liveSession(ctx context.Context) (*client.Session, error) {
	if lc.session != nil && lc.session.Err() == nil {
		return lc.session, nil
	}
	if lc.session != nil {
		closeCtx, cancel := context.WithTimeout(ctx, time.Second)
		_ = lc.session.Close(closeCtx) // it may still exist on the server and queue on the lock
		cancel()
	}
	createCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := lc.client.NewSession(createCtx, lc.cfg.SessionTimeout)
	if err != nil {
		lc.session = nil
		return nil, fmt.Errorf("open session: %w", err)
	}
	lc.session = s
	return s, nil
}

// write sends one write to the resource with token, marked as a skewed
// tenure's if skewed. It returns errStaleRefused when the resource refused
// the token as stale.
func (lc *lockClient) write(ctx context.Context, token uint64, skewed bool) error {
	writeCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(writeCtx, http.MethodPost, lc.cfg.Resource, nil)
	if err != nil {
		return fmt.Errorf("write with token %d: %w", token, err)
	}
	req.Header.Set(api.HeaderFencingToken, strconv.FormatUint(token, 10))
	req.Header.Set(writerPIDHeader, lc.pid)
	if skewed {
		req.Header.Set(skewedHeader, "1")
	}
	resp, err := lc.http.Do(req)
	if err != nil {
		return fmt.Errorf("write with token %d: %w", token, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		lc.refused++
		return errStaleRefused
	}
	return fmt.Errorf("write with token %d: status %d", token, resp.StatusCode)
}

// wait waits d by the client's clock or until ctx ends.
func (lc *lockClient) wait(ctx context.Context, d time.Duration) {
	timer := lc.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C():
	}
}
