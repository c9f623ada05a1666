package client

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/latch-io/latch/api"
)

// kvPrefix is the URL path of the node API; a node path follows it.
const kvPrefix = "/v1/kv"

// Put writes value at path, creating it and any missing ancestors. With
// Sequential the reply's Path is the name the server chose.
func (c *Client) Put(ctx context.Context, path, value string, opts ...WriteOption) (*api.Node, error) {
	o := applyWriteOptions(opts)
	if err := validateWrite(path, o); err != nil {
		return nil, err
	}
	if o.recursive {
		return nil, api.Errorf(api.CodeInvalidArgument, "Recursive applies to Delete, not Put")
	}
	body, err := json.Marshal(api.PutRequest{Value: value})
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "encode value: %v", err)
	}
	q := o.query()
	setFlag(q, "ephemeral", o.ephemeral)
	setFlag(q, "sequential", o.sequential)
	var node api.Node
	cl := &call{method: "PUT", path: kvPrefix + path, query: q, body: body, out: &node}
	if err := c.write(ctx, cl, o.session); err != nil {
		return nil, err
	}
	return &node, nil
}

// Delete removes the node at path; with Recursive its subtree too.
func (c *Client) Delete(ctx context.Context, path string, opts ...WriteOption) (*api.Deleted, error) {
	o := applyWriteOptions(opts)
	if err := validateWrite(path, o); err != nil {
		return nil, err
	}
	if o.ephemeral || o.sequential {
		return nil, api.Errorf(api.CodeInvalidArgument, "Ephemeral and Sequential apply to Put, not Delete")
	}
	q := o.query()
	setFlag(q, "recursive", o.recursive)
	var deleted api.Deleted
	cl := &call{method: "DELETE", path: kvPrefix + path, query: q, out: &deleted}
	if err := c.write(ctx, cl, o.session); err != nil {
		return nil, err
	}
	return &deleted, nil
}

// Get reads the node at path, linearizably unless Stale is given.
func (c *Client) Get(ctx context.Context, path string, opts ...ReadOption) (*api.Node, error) {
	if err := api.ValidatePath(path); err != nil {
		return nil, err
	}
	o := applyReadOptions(opts)
	var node api.Node
	cl := &call{method: "GET", path: kvPrefix + path, query: o.query(c.minIndex()), out: &node}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &node, nil
}

// Children lists the names of path's children, sorted.
func (c *Client) Children(ctx context.Context, path string, opts ...ReadOption) (*api.Children, error) {
	if err := api.ValidatePath(path); err != nil {
		return nil, err
	}
	o := applyReadOptions(opts)
	q := o.query(c.minIndex())
	q.Set("children", "true")
	var children api.Children
	cl := &call{method: "GET", path: kvPrefix + path, query: q, out: &children}
	if err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &children, nil
}

// write sends a mutating call, scoped to session s when s is not nil: it
// then carries session_id and one request_seq that every retry reuses.
func (c *Client) write(ctx context.Context, cl *call, s *Session) error {
	cl.policy = retryIfNotSent
	if s != nil {
		seq := s.nextSeq()
		cl.query.Set("session_id", s.id)
		cl.query.Set("request_seq", strconv.FormatUint(seq, 10))
		cl.policy = retrySafe
		cl.idempotencyKey = s.id + "/" + strconv.FormatUint(seq, 10)
	}
	err := c.do(ctx, cl)
	if s != nil {
		s.noteWriteError(err)
	}
	return err
}

func validateWrite(path string, o *writeOptions) error {
	if err := api.ValidatePath(path); err != nil {
		return err
	}
	if o.ephemeral && o.session == nil {
		return api.Errorf(api.CodeInvalidArgument, "an ephemeral node needs WithSession")
	}
	return nil
}

func applyWriteOptions(opts []WriteOption) *writeOptions {
	o := &writeOptions{}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

func applyReadOptions(opts []ReadOption) *readOptions {
	o := &readOptions{}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

func setFlag(q map[string][]string, name string, on bool) {
	if on {
		q[name] = []string{"true"}
	}
}
