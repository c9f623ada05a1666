package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// Keepalives of one Client are batched: every session with the same
// heartbeat interval (timeout/3) belongs to one keepaliveGroup, whose single
// goroutine sends, every interval, one heartbeat call carrying all their ids
// (session_ids, in chunks of maxHeartbeatBatch), so a process with
// thousands of sessions makes a few calls per interval on shared
// connections instead of thousands. A server that refuses a batched call
// (an older server, a body over its limit) gets one call per id instead.

// maxHeartbeatBatch bounds the ids of one heartbeat call: the server bounds
// request bodies (by default to 10 KiB; an id takes 21 bytes in JSON).
const maxHeartbeatBatch = 400

// keepaliveSet is a Client's keepalive groups, one per interval. The zero
// value is ready to use.
type keepaliveSet struct {
	mu     sync.Mutex                        // guards groups and every group's members
	groups map[time.Duration]*keepaliveGroup // by interval
}

// keepaliveGroup heartbeats the sessions of one interval.
type keepaliveGroup struct {
	client   *Client
	interval time.Duration
	members  map[*Session]struct{} // guarded by keepaliveSet.mu
	stop     chan struct{}         // closed when the last member left
}

// join adds s to the group of its interval, starting the group if needed.
// s's first heartbeat comes at the group's next beat: within an interval.
func (k *keepaliveSet) join(c *Client, s *Session) {
	interval := s.timeout / 3
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.groups == nil {
		k.groups = map[time.Duration]*keepaliveGroup{}
	}
	g := k.groups[interval]
	if g == nil {
		g = &keepaliveGroup{client: c, interval: interval, members: map[*Session]struct{}{}, stop: make(chan struct{})}
		k.groups[interval] = g
		go g.run(k)
	}
	g.members[s] = struct{}{}
}

// leave removes s; the group stops when it has no member left. A heartbeat
// already on its way may still carry s's id.
func (k *keepaliveSet) leave(s *Session) {
	interval := s.timeout / 3
	k.mu.Lock()
	defer k.mu.Unlock()
	g := k.groups[interval]
	if g == nil {
		return
	}
	if _, ok := g.members[s]; !ok {
		return
	}
	delete(g.members, s)
	if len(g.members) == 0 {
		delete(k.groups, interval)
		close(g.stop)
	}
}

// membersOf returns g's sessions, none once g stopped (the last member left).
func (k *keepaliveSet) membersOf(g *keepaliveGroup) []*Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Session, 0, len(g.members))
	for s := range g.members {
		out = append(out, s)
	}
	return out
}

// run beats every interval (measured from the start of the previous beat)
// until the group empties. It runs in its own goroutine.
func (g *keepaliveGroup) run(k *keepaliveSet) {
	clk := g.client.clock
	next := g.interval
	for {
		select {
		case <-g.stop:
			return
		case <-clk.After(next):
		}
		sent := clk.Now()
		members := k.membersOf(g)
		if len(members) > 0 {
			g.beat(members, sent)
		}
		next = max(g.interval-clk.Now().Sub(sent), 0)
	}
}

// beat sends one heartbeat for members, giving up (and its retries) after
// an interval so the next beat is not delayed, and tells each its outcome.
func (g *keepaliveGroup) beat(members []*Session, sent time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), g.interval)
	defer cancel()
	go func() {
		select {
		case <-g.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	ids := make([]string, len(members))
	for i, s := range members {
		ids[i] = s.id
	}
	outcomes := g.client.heartbeatEach(ctx, ids)
	now := g.client.clock.Now()
	for i, s := range members {
		s.heartbeatAnswered(outcomes[i], sent, now)
	}
}

// heartbeatEach heartbeats ids and returns each one's outcome (nil: alive),
// in order: one id alone is sent in the single form, more in batched calls
// of at most maxHeartbeatBatch ids.
func (c *Client) heartbeatEach(ctx context.Context, ids []string) []error {
	outcomes := make([]error, len(ids))
	if len(ids) == 1 {
		_, outcomes[0] = c.Heartbeat(ctx, ids[0])
		return outcomes
	}
	for start := 0; start < len(ids); start += maxHeartbeatBatch {
		end := min(start+maxHeartbeatBatch, len(ids))
		c.heartbeatChunk(ctx, ids[start:end], outcomes[start:end])
	}
	return outcomes
}

// heartbeatChunk heartbeats ids in one batched call and writes each one's
// outcome. When a server answers but refuses the batch itself, each id is
// sent alone; when no server answers, every id gets that error.
func (c *Client) heartbeatChunk(ctx context.Context, ids []string, outcomes []error) {
	reply, err := c.HeartbeatMany(ctx, ids)
	switch {
	case err == nil:
		expired := map[uint64]bool{}
		for _, id := range reply.Expired {
			if parsed, err := api.ParseID(id); err == nil {
				expired[parsed] = true
			}
		}
		for i, id := range ids {
			if parsed, err := api.ParseID(id); err == nil && expired[parsed] {
				outcomes[i] = &api.Error{Code: api.CodeSessionExpired, Message: "session " + id + " has expired or was closed"}
			}
		}
	case batchRefused(err):
		for i, id := range ids {
			_, outcomes[i] = c.Heartbeat(ctx, id)
		}
	default:
		for i := range ids {
			outcomes[i] = err
		}
	}
}

// batchRefused reports whether err is a server's refusal of a batched
// heartbeat as such, rather than an answer about the sessions or the
// cluster's availability.
func batchRefused(err error) bool {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.Code {
	case api.CodeInvalidArgument, api.CodeTooLarge, api.CodeNotFound, api.CodeSessionExpired, api.CodeInternal:
		return true
	}
	return false
}

// HeartbeatMany sends one batched heartbeat for ids (POST
// /v1/session/heartbeat with session_ids). The reply's Expired lists the
// ids that are gone; Alive is true when none is. Servers bound the request
// body, so keep ids to a few hundred a call.
func (c *Client) HeartbeatMany(ctx context.Context, ids []string) (*api.Heartbeat, error) {
	return postSafe[api.Heartbeat](ctx, c, "/v1/session/heartbeat", api.SessionRequest{SessionIDs: ids})
}
