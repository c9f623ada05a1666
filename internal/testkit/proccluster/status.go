package proccluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/latch-io/latch/api"
)

// Status returns member i's GET /v1/status.
func (c *Cluster) Status(i int) (api.Status, error) {
	return c.fetchStatus(c.Members[i].ClientURL)
}

// fetchStatus asks base for its status, with a short timeout since a
// paused member never answers.
func (c *Cluster) fetchStatus(base string) (api.Status, error) {
	var st api.Status
	resp, err := c.http.Get(base + "/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s: http %d", base, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("status of %s: %w", base, err)
	}
	return st, nil
}

// ErrNoLeader means the members asked did not agree on a leader among them in time.
var ErrNoLeader = errors.New("proccluster: no agreed leader")

// WaitLeader waits until every live member (running, not paused) answers
// and all name the same leader, one of them, and returns its index. It
// fails the test on timeout; call it from the test goroutine only.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.t.Helper()
	leader, err := c.FindLeader(timeout, c.Live()...)
	if err != nil {
		c.t.Fatalf("%v", err)
	}
	return leader
}

// FindLeader waits until the given members all answer and name the same
// leader, one of them, and returns its index, or ErrNoLeader after timeout.
// Safe from any goroutine.
func (c *Cluster) FindLeader(timeout time.Duration, among ...int) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if leader := c.agreedLeader(among); leader >= 0 {
			return leader, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("%w among members %v within %v:%s", ErrNoLeader, among, timeout, c.describe(among))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agreedLeader returns the index of the leader all of among name, or -1.
func (c *Cluster) agreedLeader(among []int) int {
	leader := -1
	leaderID := ""
	for _, i := range among {
		st, err := c.Status(i)
		if err != nil || st.LeaderID == "" || (leaderID != "" && st.LeaderID != leaderID) {
			return -1
		}
		leaderID = st.LeaderID
		if st.Role == "leader" && st.ID == st.LeaderID {
			leader = i
		}
	}
	return leader
}

// describe lists what the given members say about themselves.
func (c *Cluster) describe(among []int) string {
	var b strings.Builder
	for _, i := range among {
		st, err := c.Status(i)
		if err != nil {
			fmt.Fprintf(&b, " %s: %v;", c.Members[i].Name, err)
			continue
		}
		fmt.Fprintf(&b, " %s: %s term %d leader %s applied %d;", c.Members[i].Name, st.Role, st.Term, st.LeaderID, st.AppliedIndex)
	}
	return b.String()
}
