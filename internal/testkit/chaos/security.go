package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/check"
	"github.com/latch-io/latch/internal/testkit/testcerts"
)

// Security of a run (Config.TLS, Config.Auth). With TLS every member serves
// both ports over TLS (proccluster Options.TLS) and requires client
// certificates; the harness (status, membership, leader transfer) presents
// the cluster's test certificate, named "test-user". With auth, the run
// creates before any workload starts:
//
//   - root, which enabling auth requires, never used after;
//   - test-user, a certificate-only user holding the role harness (admin
//     on /), so the harness goes on working;
//   - one user per kind of client, each logging in with a password and
//     holding write permission on its own prefixes only (authUsers).
//
// The workloads then send their login token on every request: a grant
// missing, a token not honoured or a session refused to its owner shows as
// 401 or 403 errors, which the workloads' checkers count as failures.

// authUser is a non-root user of the workloads and the prefixes it may write.
type authUser struct {
	name     string
	prefixes []string
}

// The workloads' users: the shared workloads of internal/check and the
// watch workload; the lock client processes; the ZooKeeper clients.
var (
	workloadUser = authUser{"checker", []string{"/reg", "/seq", "/eph", watchDir, "/locks/chaos"}}
	lockProcUser = authUser{"lockproc", []string{"/locks/" + lockProcName}}
	zkUser       = authUser{"zk", []string{zkDir}}
	authUsers    = []authUser{workloadUser, lockProcUser, zkUser}
)

// authPassword is every test user's password: the cluster lives for one run
// on loopback or private namespaces.
const authPassword = "chaos-password"

// harnessUser is the common name of proccluster's test client certificate.
const harnessUser = "test-user"

// harnessTLS is the TLS configuration of the harness's own clients, nil
// without Config.TLS.
func (r *run) harnessTLS() *tls.Config { return r.tlsConfig }

// secure sets the run up for Config.Auth: it creates the users, enables
// auth and logs the workloads in. Without Auth it only gives the workloads
// a client that trusts the members' certificates (Config.TLS).
func (r *run) secure() error {
	if r.cluster.Security != nil {
		r.tlsConfig = r.cluster.Security.ClientTLS(r.t)
	}
	r.harness = check.NewHTTPClient(r.tlsConfig, "")
	if !r.cfg.Auth {
		r.HTTP = check.NewHTTPClient(r.harnessTLS(), "")
		return nil
	}
	if r.cluster.Security == nil {
		return errors.New("auth needs TLS: the harness authenticates with its client certificate")
	}
	admin, err := client.New(client.Config{Endpoints: r.cluster.URLs(), TLS: r.harnessTLS()})
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, change := range authChanges() {
		if err := changeAuth(admin, change); err != nil {
			return err
		}
	}
	token, err := r.login(workloadUser.name)
	if err != nil {
		return err
	}
	r.HTTP = check.NewHTTPClient(r.harnessTLS(), token)
	r.tokens = map[string]string{workloadUser.name: token}
	for _, u := range authUsers[1:] {
		if r.tokens[u.name], err = r.login(u.name); err != nil {
			return err
		}
	}
	return nil
}

// authChanges are the changes that create the users and enable auth.
func authChanges() []api.AuthChange {
	changes := []api.AuthChange{
		{Action: "user_add", User: "root", Password: authPassword},
		{Action: "user_add", User: harnessUser},
		{Action: "role_add", Role: "harness"},
		{Action: "role_grant", Role: "harness", Perm: "admin", Prefix: "/"},
		{Action: "user_grant", User: harnessUser, Role: "harness"},
	}
	for _, u := range authUsers {
		changes = append(changes,
			api.AuthChange{Action: "user_add", User: u.name, Password: authPassword},
			api.AuthChange{Action: "role_add", Role: u.name})
		for _, prefix := range u.prefixes {
			changes = append(changes, api.AuthChange{Action: "role_grant", Role: u.name, Perm: "write", Prefix: prefix})
		}
		changes = append(changes, api.AuthChange{Action: "user_grant", User: u.name, Role: u.name})
	}
	return append(changes, api.AuthChange{Action: "enable"})
}

// changeAuth applies one change, retrying while the cluster settles; a
// conflict on a retry means an earlier attempt took effect.
func changeAuth(admin *client.Client, change api.AuthChange) error {
	var err error
	for attempt := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = admin.ChangeAuth(ctx, change)
		cancel()
		if err == nil || (attempt > 0 && check.Code(err) == api.CodePreconditionFailed) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("auth %s %s%s: %w", change.Action, change.User, change.Role, err)
}

// login returns a token of user, retrying while the cluster settles.
func (r *run) login(user string) (string, error) {
	var err error
	for range 20 {
		ctx, cancel := check.RequestContext()
		var reply api.LoginResponse
		err = check.CallWith(ctx, r.harness, http.MethodPost, r.Node(), "/v1/auth/login", nil,
			&api.LoginRequest{User: user, Password: authPassword}, &reply)
		cancel()
		if err == nil {
			return reply.Token, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", fmt.Errorf("login %s: %w", user, err)
}

// userTLS is the harness's TLS configuration with a client certificate
// naming user instead of the harness: a ZooKeeper connection's certificate
// names its user, and its digest credentials must name the same one.
func (r *run) userTLS(user string) *tls.Config {
	sec := r.cluster.Security
	cert := sec.ClientCA.Issue(r.t, user, testcerts.Client, testcerts.Options{})
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		r.Anomaly("config: certificate of %s: %v", user, err)
		return r.tlsConfig
	}
	config := r.tlsConfig.Clone()
	config.Certificates = []tls.Certificate{pair}
	return config
}
