package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/latch-io/latch/api"
)

// HTTP is a bare client of one node's API: no retries, no failover, so
// tests see exactly what that node answers.
var httpClient = &http.Client{
	Timeout: 10 * time.Second,
	Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
	},
}

// Do sends one request to base+path with query q and JSON body in (nil for
// none) and decodes a 200 reply into out. An error reply comes back as *api.Error.
func Do(ctx context.Context, method, base, path string, q url.Values, in, out any) error {
	_, err := DoHeader(ctx, method, base, path, q, in, out)
	return err
}

// DoHeader is Do that also returns the reply's headers (nil if no reply
// came).
func DoHeader(ctx context.Context, method, base, path string, q url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, err
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return resp.Header, fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, data)
		}
		return resp.Header, &e.Error
	}
	if out != nil {
		return resp.Header, json.Unmarshal(data, out)
	}
	return resp.Header, nil
}

// Put writes value at path on node base; prev is "", "any", "none" or a version.
func Put(ctx context.Context, base, path, value, prev string) (api.Node, error) {
	q := url.Values{}
	if prev != "" {
		q.Set("prev_version", prev)
	}
	var n api.Node
	err := Do(ctx, http.MethodPut, base, "/v1/kv"+path, q, api.PutRequest{Value: value}, &n)
	return n, err
}

// Get reads path on node base at consistency (api.Linearizable or api.Stale).
func Get(ctx context.Context, base, path, consistency string) (api.Node, error) {
	var n api.Node
	err := Do(ctx, http.MethodGet, base, "/v1/kv"+path, url.Values{"consistency": {consistency}}, nil, &n)
	return n, err
}

// Delete removes path on node base.
func Delete(ctx context.Context, base, path string) error {
	return Do(ctx, http.MethodDelete, base, "/v1/kv"+path, nil, nil, nil)
}

// URL returns node i's client API base URL.
func (c *Cluster) URL(i int) string { return c.Nodes[i].URL }
