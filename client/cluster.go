package client

import (
	"context"

	"github.com/latch-io/latch/api"
)

// Status returns GET /v1/status of whichever server answers.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	return c.StatusOf(ctx, "")
}

// StatusOf returns GET /v1/status of one endpoint, without failover; an
// empty endpoint means any server.
func (c *Client) StatusOf(ctx context.Context, endpoint string) (*api.Status, error) {
	if endpoint != "" {
		normalized, err := normalizeEndpoint(endpoint)
		if err != nil {
			return nil, api.Errorf(api.CodeInvalidArgument, "%v", err)
		}
		endpoint = normalized
	}
	var status api.Status
	cl := &call{method: "GET", path: "/v1/status", endpoint: endpoint, out: &status}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &status, nil
}

// Members returns GET /v1/cluster/members: linearizable by default (it sees
// every membership change acknowledged before it), or Stale() for this
// endpoint's own view.
func (c *Client) Members(ctx context.Context, opts ...ReadOption) (*api.Members, error) {
	o := applyReadOptions(opts)
	var members api.Members
	cl := &call{method: "GET", path: "/v1/cluster/members", query: o.query(c.minIndex()), out: &members}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &members, nil
}
