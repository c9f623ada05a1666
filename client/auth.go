package client

import (
	"context"
	"encoding/json"

	"github.com/latch-io/latch/api"
)

// Login checks user's password and returns a token for Config.Token. A
// login is a write (the token is recorded through the log), sent once
// unless no server saw it.
func (c *Client) Login(ctx context.Context, user, password string) (api.LoginResponse, error) {
	var out api.LoginResponse
	err := c.postOnce(ctx, "/v1/auth/login", api.LoginRequest{User: user, Password: password}, &out)
	return out, err
}

// Logout revokes the client's token (Config.Token).
func (c *Client) Logout(ctx context.Context) (api.AuthChanged, error) {
	var out api.AuthChanged
	err := c.postOnce(ctx, "/v1/auth/logout", struct{}{}, &out)
	return out, err
}

// ChangeAuth applies one change of the auth state (an admin's).
func (c *Client) ChangeAuth(ctx context.Context, change api.AuthChange) (api.AuthChanged, error) {
	var out api.AuthChanged
	err := c.postOnce(ctx, "/v1/auth", change, &out)
	return out, err
}

// AuthStatus lists the auth state: enabled, users and their roles, roles and
// their grants (never a password hash).
func (c *Client) AuthStatus(ctx context.Context) (api.AuthStatus, error) {
	var out api.AuthStatus
	err := c.do(ctx, &call{method: "GET", path: "/v1/auth", policy: retrySafe, out: &out})
	return out, err
}

// postOnce posts in to path, resent only if no server saw it.
func (c *Client) postOnce(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, &call{method: "POST", path: path, body: body, policy: retryIfNotSent, out: out})
}
