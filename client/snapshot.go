package client

import (
	"context"
	"fmt"
	"io"
	"net/url"
)

// SaveSnapshot streams a backup file of one member's state (GET
// /v1/snapshot, docs/api.md) into w: the state after a linearizable barrier,
// so every write acknowledged before the call is in it. The call fails over
// between endpoints until a member starts streaming; a stream cut after that
// returns its error and leaves w holding a file without its trailer, which
// `latchctl snapshot save` refuses. Verifying the bytes is the caller's job
// (the file format is internal to latch).
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	var written int64
	err := c.do(ctx, &call{method: "GET", path: "/v1/snapshot", query: url.Values{}, policy: retrySafe,
		stream: func(body io.Reader) error {
			n, err := io.Copy(w, body)
			written = n
			if err != nil {
				return fmt.Errorf("client: snapshot stream cut after %d bytes: %w", n, err)
			}
			return nil
		}})
	return written, err
}
