package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/latch-io/latch/api"
)

// HealthProbeTimeout bounds each member's probe in ClusterHealth: a member
// that has not answered its GET /v1/status within it is unreachable.
const HealthProbeTimeout = time.Second

// maxStatusReply bounds the body of a probed member's status reply.
const maxStatusReply = 1 << 20

// healthClient probes members' client ports; it is shared so that
// connections are reused between the dashboard's polls.
var healthClient = &http.Client{Timeout: HealthProbeTimeout}

// ClusterHealth asks every member in this server's member table for its
// GET /v1/status over its client_url (this server answers for itself
// without a request), all at once, each within HealthProbeTimeout, and
// reports each one's role, indexes and lag behind the highest commit index
// reported. It reads and changes nothing of the replicated state. With
// sharding, each member's status grows a list of groups and so does this.
// The probes carry the caller's bearer token (ctx's Credentials), which
// every member accepts alike, so that with auth enabled the other members
// answer them; a caller known by its client certificate alone has none to
// pass on, and the others then show as unreachable.
func (s *Server) ClusterHealth(ctx context.Context) api.ClusterHealth {
	members := s.Members()
	out := api.ClusterHealth{Answered: s.cfg.Name, Members: make([]api.MemberHealth, len(members.Members)), Index: members.Index}
	self := api.FormatID(s.id)
	var wg sync.WaitGroup
	for i, m := range members.Members {
		out.Members[i].Member = m
		if m.ID == self {
			fillHealth(&out.Members[i], s.Status())
			continue
		}
		wg.Add(1)
		go func(h *api.MemberHealth) {
			defer wg.Done()
			st, err := probeStatus(ctx, h.ClientURL, CredentialsFrom(ctx).Token)
			if err != nil {
				h.Error = err.Error()
				return
			}
			fillHealth(h, st)
		}(&out.Members[i])
	}
	wg.Wait()
	out.LeaderID = agreedLeader(out.Members)
	setLag(out.Members)
	return out
}

// fillHealth records the status a member answered.
func fillHealth(h *api.MemberHealth, st api.Status) {
	h.Reachable, h.Role, h.Term, h.LeaderID = true, st.Role, st.Term, st.LeaderID
	h.CommitIndex, h.AppliedIndex = st.CommitIndex, st.AppliedIndex
}

// probeStatus fetches GET /v1/status from the member at clientURL, with
// token as its bearer token if it is not "".
func probeStatus(ctx context.Context, clientURL, token string) (api.Status, error) {
	if clientURL == "" {
		return api.Status{}, fmt.Errorf("no client_url announced")
	}
	ctx, cancel := context.WithTimeout(ctx, HealthProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/v1/status", nil)
	if err != nil {
		return api.Status{}, fmt.Errorf("probe %s: %w", clientURL, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return api.Status{}, fmt.Errorf("probe %s: %w", clientURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return api.Status{}, fmt.Errorf("probe %s: status %d", clientURL, resp.StatusCode)
	}
	var st api.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusReply)).Decode(&st); err != nil {
		return api.Status{}, fmt.Errorf("probe %s: bad status reply: %w", clientURL, err)
	}
	return st, nil
}

// agreedLeader is the id of the member that reports itself leader in the
// highest term any reachable member reports itself leader in ("" if none).
func agreedLeader(members []api.MemberHealth) string {
	var leader string
	var term uint64
	for _, m := range members {
		if m.Reachable && m.Role == "leader" && m.Term >= term {
			leader, term = m.ID, m.Term
		}
	}
	return leader
}

// setLag sets each reachable member's lag behind the highest commit index
// reported.
func setLag(members []api.MemberHealth) {
	var commit uint64
	for _, m := range members {
		commit = max(commit, m.CommitIndex)
	}
	for i := range members {
		if members[i].Reachable && members[i].AppliedIndex < commit {
			members[i].Lag = commit - members[i].AppliedIndex
		}
	}
}
