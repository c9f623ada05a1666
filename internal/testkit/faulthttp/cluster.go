package faulthttp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/testcluster"
)

// Cluster is a real in-process latch cluster with a Proxy in front of each
// member. Clients are given URLs(); the test reaches the members directly
// (Expire, WatchCount) or through the testcluster (Real).
type Cluster struct {
	t       testing.TB
	Real    *testcluster.Cluster
	proxies []*Proxy
}

// NewCluster starts n members with opts (testcluster.New) and a proxy in
// front of each; everything stops at the end of the test.
func NewCluster(t testing.TB, n int, opts testcluster.Options) *Cluster {
	t.Helper()
	real := testcluster.New(t, n, opts)
	c := &Cluster{t: t, Real: real}
	var pairs []string
	for i, node := range real.Nodes {
		p, err := New(node.Name, real.URL(i))
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		c.proxies = append(c.proxies, p)
		pairs = append(pairs, real.URL(i), p.URL())
	}
	t.Cleanup(c.Close)
	rewrite := strings.NewReplacer(pairs...)
	for _, p := range c.proxies {
		p.setRewrite(rewrite)
	}
	return c
}

// URLs returns the proxies' base URLs, in member order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.proxies))
	for i, p := range c.proxies {
		urls[i] = p.URL()
	}
	return urls
}

// Proxy returns the proxy in front of member i (0-based).
func (c *Cluster) Proxy(i int) *Proxy { return c.proxies[i] }

// Close stops every proxy: clients see refused connections everywhere.
// The members run on until the test ends.
func (c *Cluster) Close() {
	for _, p := range c.proxies {
		p.Stop()
	}
}

// CutStreams cuts every event stream through every proxy (Proxy.CutStreams).
func (c *Cluster) CutStreams(reason string) {
	for _, p := range c.proxies {
		p.CutStreams(reason)
	}
}

// Index returns the highest index the running members have applied.
func (c *Cluster) Index() uint64 {
	var index uint64
	for _, i := range c.Real.Running() {
		index = max(index, c.Real.Status(i).AppliedIndex)
	}
	return index
}

// Expire ends session id at once, as its expiry would: the session is gone
// and its ephemeral nodes with it. The session is closed straight at a
// member, past the proxies, so no client sees the call.
func (c *Cluster) Expire(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for _, i := range c.Real.Running() {
		err = testcluster.Do(ctx, http.MethodPost, c.Real.URL(i), "/v1/session/close", nil, api.SessionRequest{SessionID: id}, nil)
		if err == nil {
			return
		}
	}
	c.t.Fatalf("faulthttp: expire session %s: %v", id, err)
}

// SessionByHandle returns the id of the live session whose public handle is
// handle (as reads show it), from a running member's state: the shortcut a
// test needs to act on a session it did not create.
func (c *Cluster) SessionByHandle(handle string) (string, bool) {
	for _, i := range c.Real.Running() {
		if id, ok := c.Real.SessionByHandle(i, handle); ok {
			return id, true
		}
	}
	return "", false
}

// Heartbeats returns how many heartbeats for session id the members
// answered 200, through any proxy (single or batched form).
func (c *Cluster) Heartbeats(id string) int {
	n := 0
	for _, p := range c.proxies {
		n += p.Heartbeats(id)
	}
	return n
}

// Registration is one watch registration a member accepted.
type Registration struct {
	Member  string // the member's name
	Time    time.Time
	Request api.WatchRequest
	Reply   api.Watch
}

// Registrations returns every watch registration the members accepted
// through the proxies, in the order they arrived.
func (c *Cluster) Registrations() []Registration {
	var out []Registration
	for _, p := range c.proxies {
		for _, r := range p.Requests() {
			if r.Method != http.MethodPost || r.Path != "/v1/watch" || r.Status != http.StatusOK {
				continue
			}
			reg := Registration{Member: p.Name(), Time: r.Time}
			if json.Unmarshal(r.Body, &reg.Request) != nil || json.Unmarshal(r.Reply, &reg.Reply) != nil {
				continue
			}
			out = append(out, reg)
		}
	}
	slices.SortStableFunc(out, func(a, b Registration) int { return a.Time.Compare(b.Time) })
	return out
}

// WatchCount returns how many watches member i holds, from its metrics.
func (c *Cluster) WatchCount(i int) int {
	c.t.Helper()
	n, err := metric(c.Real.URL(i), "latch_watches_registered")
	if err != nil {
		c.t.Fatalf("faulthttp: watches of %s: %v", c.Real.Nodes[i].Name, err)
	}
	return int(n)
}

// metric reads one unlabelled metric from the member at base.
func metric(base, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		value, ok := strings.CutPrefix(scanner.Text(), name+" ")
		if ok {
			return strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	if err := scanner.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no metric %s at %s", name, base)
}
