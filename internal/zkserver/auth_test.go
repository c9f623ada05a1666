package zkserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/crypto/bcrypt"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/testkit/testcerts"
	"github.com/latch-io/latch/internal/testkit/testcluster"
	"github.com/latch-io/latch/internal/zkproto"
)

// authOptions are cluster options with cheap password hashes.
var authOptions = testcluster.Options{Auth: server.AuthConfig{PasswordCost: bcrypt.MinCost}}

// setUpZKAuth makes root, a reader and two writers of /app, the node
// /app/x, and enables auth, through node 0's server.
func setUpZKAuth(t *testing.T, c *zkCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := c.Nodes[0].Server
	changes := []api.AuthChange{
		{Action: "user_add", User: "root", Password: "root-pw"},
		{Action: "role_add", Role: "r"},
		{Action: "role_grant", Role: "r", Perm: "read", Prefix: "/app"},
		{Action: "role_add", Role: "w"},
		{Action: "role_grant", Role: "w", Perm: "write", Prefix: "/app"},
		{Action: "user_add", User: "reader", Password: "reader-pw"},
		{Action: "user_grant", User: "reader", Role: "r"},
		{Action: "user_add", User: "writer", Password: "writer-pw"},
		{Action: "user_grant", User: "writer", Role: "w"},
		{Action: "user_add", User: "other", Password: "other-pw"},
		{Action: "user_grant", User: "other", Role: "w"},
	}
	for _, ch := range changes {
		if _, err := srv.ChangeAuth(ctx, ch); err != nil {
			t.Fatalf("%+v: %v", ch, err)
		}
	}
	if _, err := srv.Put(ctx, server.PutRequest{Path: "/app/x", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ChangeAuth(ctx, api.AuthChange{Action: "enable"}); err != nil {
		t.Fatal(err)
	}
}

// zkCase is one ZooKeeper operation of the matrix; run returns its error.
// u is unique per identity.
type zkCase struct {
	name string
	need need
	run  func(conn *zk.Conn, u string) error
}

// need is what an operation asks of the connection's user.
type need int

const (
	needUser  need = iota // any authenticated user
	needRead              // read on the path
	needWrite             // write on the path
	needAdmin             // admin on the path
)

var zkCases = []zkCase{
	{"exists", needRead, func(c *zk.Conn, _ string) error { _, err := existsErr(c.Exists("/app/x")); return err }},
	{"getData", needRead, func(c *zk.Conn, _ string) error { _, _, err := c.Get("/app/x"); return err }},
	{"getChildren", needRead, func(c *zk.Conn, _ string) error { _, _, err := c.Children("/app"); return err }},
	{"exists watch", needRead, func(c *zk.Conn, _ string) error { _, _, _, err := c.ExistsW("/app/x"); return err }},
	{"getACL", needRead, func(c *zk.Conn, _ string) error { _, _, err := c.GetACL("/app/x"); return err }},
	{"sync", needRead, func(c *zk.Conn, _ string) error { _, err := c.Sync("/app/x"); return err }},
	{"create", needWrite, func(c *zk.Conn, u string) error {
		_, err := c.Create("/app/c-"+u, []byte("v"), 0, zk.WorldACL(zk.PermAll))
		return err
	}},
	{"create ephemeral", needWrite, func(c *zk.Conn, u string) error {
		_, err := c.Create("/app/e-"+u, []byte("v"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		return err
	}},
	{"setData", needWrite, func(c *zk.Conn, _ string) error { _, err := c.Set("/app/x", []byte("2"), -1); return err }},
	{"delete", needWrite, func(c *zk.Conn, u string) error {
		if err := c.Delete("/app/none-"+u, -1); !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	}},
	{"multi", needWrite, func(c *zk.Conn, u string) error {
		_, err := c.Multi(&zk.CreateRequest{Path: "/app/m-" + u, Data: []byte("v"), Acl: zk.WorldACL(zk.PermAll)})
		return err
	}},
	// setACL needs admin on the path, and is then refused: latch grants
	// access by role, never per node.
	{"setACL", needAdmin, func(c *zk.Conn, _ string) error {
		if _, err := c.SetACL("/app/x", zk.WorldACL(zk.PermRead), -1); !errors.Is(err, zk.ErrInvalidACL) {
			return err
		}
		return nil
	}},
}

// existsErr turns exists' false into an error, so that a refused exists
// (which go-zookeeper may report as false) is told from a found node.
func existsErr(found bool, _ *zk.Stat, err error) (bool, error) {
	if err == nil && !found {
		return false, zk.ErrNoNode
	}
	return found, err
}

// TestAuthMatrixZooKeeper is TestAuthMatrix's ZooKeeper rows: every
// opcode a client sends, as no one (no addauth), a reader, a writer and
// root, each through addauth digest: NoAuth without the permission, else
// the operation's own answer.
func TestAuthMatrixZooKeeper(t *testing.T) {
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	identities := []struct {
		name, user, password string
		may                  func(need) bool
		aclPerms             int32 // what getACL reports on /app/x
	}{
		{"none", "", "", func(need) bool { return false }, 0},
		{"reader", "reader", "reader-pw", func(n need) bool { return n == needUser || n == needRead }, zk.PermRead},
		{"writer", "writer", "writer-pw", func(n need) bool { return n != needAdmin }, zk.PermRead | zk.PermWrite | zk.PermCreate | zk.PermDelete},
		{"root", "root", "root-pw", func(need) bool { return true }, zk.PermAll},
	}
	for _, id := range identities {
		conn, _ := connect(t, c.addrs, 10*time.Second)
		if id.user != "" {
			if err := conn.AddAuth("digest", []byte(id.user+":"+id.password)); err != nil {
				t.Fatalf("addauth %s: %v", id.user, err)
			}
		}
		if id.user != "" {
			if acl, _, err := conn.GetACL("/app/x"); err != nil || len(acl) != 1 || acl[0].Perms != id.aclPerms {
				t.Errorf("%s: getACL = %+v, %v; want perms %d", id.name, acl, err, id.aclPerms)
			}
		}
		for _, op := range zkCases {
			t.Run(id.name+"/"+op.name, func(t *testing.T) {
				err := op.run(conn, id.name)
				switch {
				case id.may(op.need) && err != nil:
					t.Errorf("allowed: got %v", err)
				case !id.may(op.need) && !errors.Is(err, zk.ErrNoAuth):
					t.Errorf("refused: got %v, want %v", err, zk.ErrNoAuth)
				}
			})
		}
		conn.Close()
	}
}

// TestZooKeeperDigestRefusals: a wrong password, an unknown user and
// another scheme fail addauth (AuthFailed) and end the connection; an
// anonymous connection holds no session in the replicated state; a
// connection resuming another user's session with its id and password is
// refused once it authenticates as itself.
func TestZooKeeperDigestRefusals(t *testing.T) {
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	before := c.Nodes[0].Server.StateCounts().Sessions
	for _, auth := range []struct{ scheme, cred string }{
		{"digest", "writer:wrong"}, {"digest", "nobody:pw"}, {"digest", "no-colon"}, {"ip", "127.0.0.1"},
	} {
		r := dialRaw(t, c.addrs[0])
		r.session()
		h, _ := r.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: auth.scheme, Auth: []byte(auth.cred)})
		if h.Err != zkproto.ErrAuthFailed || !r.closed() {
			t.Errorf("addauth %s %q: %v, closed %v; want AuthFailed and the connection closed", auth.scheme, auth.cred, h.Err, r.closed())
		}
	}
	if after := c.Nodes[0].Server.StateCounts().Sessions; after != before {
		t.Errorf("anonymous connections made %d sessions", after-before)
	}

	// The writer's session, resumed by a connection that proves "other".
	owner := dialRaw(t, c.addrs[0])
	sess := owner.session()
	if h, _ := owner.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("writer:writer-pw")}); h.Err != zkproto.ErrOK {
		t.Fatalf("writer addauth: %v", h.Err)
	}
	thief := dialRaw(t, c.addrs[0])
	resumed, err := thief.connect(zkproto.ConnectRequest{SessionID: sess.SessionID, Passwd: sess.Passwd, TimeOut: 10000})
	if err != nil || resumed.SessionID != sess.SessionID {
		t.Fatalf("resume = %+v, %v", resumed, err)
	}
	h, _ := thief.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("other:other-pw")})
	if h.Err == zkproto.ErrOK || !thief.closed() {
		t.Errorf("another user's session after addauth: %v, closed %v", h.Err, thief.closed())
	}
	if h, _ := owner.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/app/x"}); h.Err != zkproto.ErrOK {
		t.Errorf("the owner's exists after the attempt: %v", h.Err)
	}
}

// TestZooKeeperCertificateUser: with a verified client certificate whose
// common name is a user, a ZooKeeper connection acts as that user without
// addauth.
func TestZooKeeperCertificateUser(t *testing.T) {
	ca := testcerts.NewCA(t, "zk test CA")
	serverCert := ca.Issue(t, "n0", testcerts.Server, testcerts.Options{})
	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert.TLS(t)}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	c := startZKWith(t, 1, Config{}, authOptions, func(ln net.Listener) net.Listener { return tls.NewListener(ln, serverTLS) })
	setUpZKAuth(t, c)
	dialAs := func(name string) *zk.Conn {
		clientTLS := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, name, testcerts.Client, testcerts.Options{}).TLS(t)},
			ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		dialer := func(network, address string, timeout time.Duration) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, clientTLS)
		}
		conn, events, err := zk.Connect(c.addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithDialer(dialer))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		for ev := range events {
			if ev.State == zk.StateHasSession {
				return conn
			}
		}
		return conn
	}
	writer := dialAs("writer")
	if _, err := writer.Create("/app/by-cert", []byte("v"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Errorf("create as the certificate's user: %v", err)
	}
	stranger := dialAs("nobody") // a verified certificate, but no such user: anonymous
	if _, _, err := stranger.Get("/app/x"); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("get as an unknown certificate name: %v", err)
	}
	if err := stranger.AddAuth("digest", []byte("reader:reader-pw")); err != nil {
		t.Fatalf("addauth after an unknown certificate name: %v", err)
	}
	if _, _, err := stranger.Get("/app/x"); err != nil {
		t.Errorf("get as reader: %v", err)
	}
}

// TestZkCliAddAuth: zkCli.sh is refused without credentials, and reads
// and writes after addauth digest.
func TestZkCliAddAuth(t *testing.T) {
	requireZkCli(t)
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	stdin, out := startZkCli(t, c.addrs[0])
	at := out.waitFor(t, 0, "type:None path:null", time.Minute)
	steps := []struct{ command, want string }{
		{"get /app/x", "Insufficient permission : /app/x"},
		{"addauth digest writer:writer-pw", ""},
		{"create /app/cli hello", "Created /app/cli"},
		{"get /app/cli", "hello"},
		{"create /elsewhere x", "Insufficient permission : /elsewhere"},
	}
	for _, step := range steps {
		if _, err := io.WriteString(stdin, step.command+"\n"); err != nil {
			t.Fatalf("%s: %v", step.command, err)
		}
		if step.want != "" {
			at = out.waitFor(t, at, step.want, 30*time.Second)
		}
	}
	_, _ = io.WriteString(stdin, "quit\n")
}

// TestZooKeeperAuthDisabledAfterHandshake: a connection left anonymous by
// auth enabled at its handshake gets its session at its addauth once auth
// is disabled, and then works as any connection does without auth.
func TestZooKeeperAuthDisabledAfterHandshake(t *testing.T) {
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	r := dialRaw(t, c.addrs[0])
	r.session()
	if h, _ := r.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/app/x"}); h.Err != zkproto.ErrNoAuth {
		t.Fatalf("anonymous exists: %v, want NoAuth", h.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rootCtx := server.WithCredentials(ctx, server.Credentials{User: "root"})
	if _, err := c.Nodes[0].Server.ChangeAuth(rootCtx, api.AuthChange{Action: "disable"}); err != nil {
		t.Fatal(err)
	}
	if h, _ := r.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("anyone:anything")}); h.Err != zkproto.ErrOK {
		t.Fatalf("addauth with auth disabled: %v", h.Err)
	}
	if h, _ := r.call(zkproto.OpCreate, &zkproto.CreateRequest{Path: "/app/e", ACL: worldAnyone, Flags: zkproto.ModeEphemeral}); h.Err != zkproto.ErrOK {
		t.Errorf("ephemeral create after the session was made: %v", h.Err)
	}
}

// TestAuthMatrixZooKeeperRaw is the matrix for the opcodes go-zookeeper
// does not send, over a raw connection: anonymous, reader and writer.
func TestAuthMatrixZooKeeperRaw(t *testing.T) {
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	cases := []struct {
		name string
		op   zkproto.OpCode
		body zkproto.Record
		need need
	}{
		// create2 first: a change after the addWatch would send a
		// notification among the replies.
		{"create2", zkproto.OpCreate2, &zkproto.CreateRequest{Path: "/app/raw", ACL: worldAnyone}, needWrite},
		{"getChildren2", zkproto.OpGetChildren2, &zkproto.PathWatchRequest{Path: "/app"}, needRead},
		{"getAllChildrenNumber", zkproto.OpGetAllChildrenNumber, &zkproto.PathRequest{Path: "/app"}, needRead},
		{"check", zkproto.OpCheck, &zkproto.CheckVersionRequest{Path: "/app/x", Version: -1}, needRead},
		{"addWatch", zkproto.OpAddWatch, &zkproto.PathTypeRequest{Path: "/app", Type: int32(zkproto.AddWatchPersistentRecursive)}, needRead},
		{"getEphemerals", zkproto.OpGetEphemerals, &zkproto.PathRequest{Path: "/"}, needUser},
	}
	identities := []struct {
		name, credential string
		may              func(need) bool
	}{
		{"none", "", func(need) bool { return false }},
		{"reader", "reader:reader-pw", func(n need) bool { return n == needUser || n == needRead }},
		{"writer", "writer:writer-pw", func(need) bool { return true }},
	}
	for _, id := range identities {
		r := dialRaw(t, c.addrs[0])
		r.session()
		if id.credential != "" {
			if h, _ := r.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte(id.credential)}); h.Err != zkproto.ErrOK {
				t.Fatalf("%s addauth: %v", id.name, h.Err)
			}
		}
		for _, tc := range cases {
			h, _ := r.call(tc.op, tc.body)
			want := zkproto.ErrNoAuth
			if id.may(tc.need) {
				want = zkproto.ErrOK
			}
			if h.Err != want {
				t.Errorf("%s/%s: %v, want %v", id.name, tc.name, h.Err, want)
			}
		}
	}
}

// TestAuthRefusalNamesItsOperation: an operation of a multi the user may
// not perform is refused at its place, as ZooKeeper reports NoAuth there
// (OK before it, RuntimeInconsistency after it, the reply header OK), and
// nothing of the multi is applied; a read of a multiRead the user may not
// make fails on its own and the others are answered.
func TestAuthRefusalNamesItsOperation(t *testing.T) {
	c := startZKWith(t, 1, Config{}, authOptions, nil)
	setUpZKAuth(t, c)
	w := dialRaw(t, c.addrs[0])
	w.session()
	if h, _ := w.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("writer:writer-pw")}); h.Err != zkproto.ErrOK {
		t.Fatalf("writer addauth: %v", h.Err)
	}
	h, rest := w.call(zkproto.OpMulti, multiRequest{mcreate("/app/m1", 0), mcreate("/outside", 0), mcreate("/app/m2", 0)})
	want := []zkproto.ErrCode{zkproto.ErrOK, zkproto.ErrNoAuth, zkproto.ErrRuntimeInconsistency}
	if got := decodeMultiReply(t, rest).codes(); h.Err != zkproto.ErrOK || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("multi with a refused create: header %v, results %v; want header 0, results %v", h.Err, got, want)
	}
	if h, _ := w.call(zkproto.OpExists, &zkproto.PathWatchRequest{Path: "/app/m1"}); h.Err != zkproto.ErrNoNode {
		t.Errorf("exists /app/m1 after the refused multi: %v, want NoNode", h.Err)
	}

	r := dialRaw(t, c.addrs[0])
	r.session()
	if h, _ := r.call(zkproto.OpAuth, &zkproto.AuthPacket{Scheme: "digest", Auth: []byte("reader:reader-pw")}); h.Err != zkproto.ErrOK {
		t.Fatalf("reader addauth: %v", h.Err)
	}
	h, rest = r.call(zkproto.OpMultiRead, multiRequest{
		{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/app/x"}},
		{zkproto.OpGetData, &zkproto.PathWatchRequest{Path: "/outside"}},
		{zkproto.OpGetChildren, &zkproto.PathWatchRequest{Path: "/app"}},
	})
	got := decodeMultiReply(t, rest)
	want = []zkproto.ErrCode{zkproto.ErrOK, zkproto.ErrNoAuth, zkproto.ErrOK}
	if h.Err != zkproto.ErrOK || fmt.Sprint(got.codes()) != fmt.Sprint(want) || len(got.data) != 1 || string(got.data[0]) != "1" {
		t.Errorf("multiRead with a refused read: header %v, results %v, data %q; want header 0, results %v, data [1]", h.Err, got.codes(), got.data, want)
	}
}
