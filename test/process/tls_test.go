package process

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/proccluster"
	"github.com/latch-io/latch/internal/testkit/testcerts"
)

// TestTLSClusterSurvivesLeaderKill: three latchd processes with TLS on both
// ports (mutual TLS between members, client certificates required) elect a
// leader, replicate every write to every member, and keep serving after
// kill -9 of the leader; the killed member comes back and catches up.
// Cluster health, asked with the client certificate, shows every member
// reachable, the killed one unreachable, then reachable again.
func TestTLSClusterSurvivesLeaderKill(t *testing.T) {
	cluster := proccluster.Start(t, proccluster.Options{TLS: true})
	leader := cluster.WaitLeader(30 * time.Second)
	for _, u := range cluster.URLs() {
		if !strings.HasPrefix(u, "https://") {
			t.Fatalf("member URL %q is not https", u)
		}
	}
	c := tlsClient(t, cluster, cluster.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/tls/before", "1"); err != nil {
		t.Fatalf("put before the kill: %v", err)
	}
	for i := range cluster.Members {
		waitStale(t, cluster, i, "/tls/before", "1")
	}
	viewer := (leader + 1) % len(cluster.Members)
	waitHealth(t, cluster, viewer, len(cluster.Members))

	cluster.Kill(leader)
	others := []int{}
	for i := range cluster.Members {
		if i != leader {
			others = append(others, i)
		}
	}
	newLeader, err := cluster.FindLeader(30*time.Second, others...)
	if err != nil {
		t.Fatalf("no leader after kill -9 of %s: %v", cluster.Members[leader].Name, err)
	}
	t.Logf("new leader %s", cluster.Members[newLeader].Name)
	putEventually(t, c, "/tls/after", "2")
	if node, err := c.Get(ctx, "/tls/before"); err != nil || node.Value != "1" {
		t.Fatalf("get of the write before the kill = %+v, %v", node, err)
	}
	waitHealth(t, cluster, viewer, len(cluster.Members)-1)
	if err := cluster.Restart(leader); err != nil {
		t.Fatal(err)
	}
	waitStale(t, cluster, leader, "/tls/after", "2")
	waitHealth(t, cluster, viewer, len(cluster.Members))
}

// waitHealth waits until member i's GET /v1/cluster/health, asked with the
// test's client certificate, shows reachable members reachable and a leader.
func waitHealth(t *testing.T, cluster *proccluster.Cluster, i, reachable int) {
	t.Helper()
	var health api.ClusterHealth
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		health, err = clusterHealth(cluster, i)
		if err == nil && health.LeaderID != "" && countReachable(health) == reachable {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's cluster health never showed %d members reachable and a leader: %+v, %v", cluster.Members[i].Name, reachable, health, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterHealth asks member i for GET /v1/cluster/health with the test's
// client certificate.
func clusterHealth(cluster *proccluster.Cluster, i int) (api.ClusterHealth, error) {
	var health api.ClusterHealth
	resp, err := cluster.HTTPClient().Get(cluster.Members[i].ClientURL + "/v1/cluster/health")
	if err != nil {
		return health, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return health, fmt.Errorf("status %d", resp.StatusCode)
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	return health, err
}

func countReachable(health api.ClusterHealth) int {
	n := 0
	for _, m := range health.Members {
		if m.Reachable {
			n++
		}
	}
	return n
}

// TestTLSCertificateRotation: certificates written over a running member's
// files are served on its next handshakes on both ports, without a
// restart, and the other members accept its new peer certificate.
func TestTLSCertificateRotation(t *testing.T) {
	cluster := proccluster.Start(t, proccluster.Options{TLS: true})
	cluster.WaitLeader(30 * time.Second)
	member := cluster.Members[0]
	pid := member.PID()
	clientAddr := strings.TrimPrefix(member.ClientURL, "https://")
	host, _, err := net.SplitHostPort(clientAddr)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := cluster.Security.ClientTLS(t)
	probe := cluster.Security.PeerCA.Issue(t, "probe", testcerts.Peer, testcerts.Options{}).TLS(t)
	peerTLS := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cluster.Security.PeerCA.Pool(), ServerName: host, Certificates: []tls.Certificate{probe}}
	beforePeer := servedSerial(t, member.PeerAddr, peerTLS)

	rotated := cluster.Security.IssueMemberCerts(t, member.Name, host)
	waitFor(t, 10*time.Second, "the member to serve the rotated client certificate", func() bool {
		return servedSerial(t, clientAddr, clientTLS).Cmp(rotated.SerialNumber) == 0
	})
	waitFor(t, 10*time.Second, "the member to serve a rotated peer certificate", func() bool {
		return servedSerial(t, member.PeerAddr, peerTLS).Cmp(beforePeer) != 0
	})
	if member.PID() != pid {
		t.Fatalf("member restarted (pid %d, was %d)", member.PID(), pid)
	}
	// A restarted peer opens new connections both ways: handshakes with the
	// rotated peer certificate, in each direction.
	if err := cluster.Restart(1); err != nil {
		t.Fatal(err)
	}
	cluster.WaitLeader(30 * time.Second)
	putEventually(t, tlsClient(t, cluster, []string{member.ClientURL}), "/tls/rotated", "yes")
	for i := range cluster.Members {
		waitStale(t, cluster, i, "/tls/rotated", "yes")
	}
}

// TestTLSRefusesPlainAndUnauthenticatedClients: a TLS member answers no
// clear-text request and no client without a certificate from its client CA.
func TestTLSRefusesPlainAndUnauthenticatedClients(t *testing.T) {
	cluster := proccluster.Start(t, proccluster.Options{TLS: true, Nodes: 1})
	cluster.WaitLeader(30 * time.Second)
	plain := "http://" + strings.TrimPrefix(cluster.Members[0].ClientURL, "https://")
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(plain + "/v1/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("clear-text GET /v1/status answered 200")
		}
	}
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cluster.Security.ClientCA.Pool()}}}
	_, err := noCert.Get(cluster.Members[0].ClientURL + "/v1/status")
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("GET without a client certificate: %v; want the handshake refused (certificate required)", err)
	}

	// TLS 1.1 is refused on the client port.
	old := cluster.Security.ClientTLS(t)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := tlsExchange(cluster.Members[0].ClientURL, old); err == nil || !strings.Contains(err.Error(), "protocol version not supported") {
		t.Fatalf("TLS 1.1 handshake on the client port: %v; want protocol version not supported", err)
	}
	// A client certificate (from the client CA) does not open the peer port.
	user := cluster.Security.ClientTLS(t)
	userCert := user.Certificates[0]
	peerDial := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cluster.Security.PeerCA.Pool(), ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &userCert, nil }}
	if _, err := tlsExchange(cluster.Members[0].PeerAddr, peerDial); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Fatalf("client certificate on the peer port: %v; want unknown certificate authority", err)
	}
}

// tlsExchange runs a TLS handshake with addr (a URL's host:port or an
// address) and reads once, so that a refusal of the client's certificate,
// which TLS 1.3 reports after the handshake, surfaces; it returns the
// handshake's state or the error.
func tlsExchange(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	addr = strings.TrimPrefix(addr, "https://")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return tls.ConnectionState{}, err
	}
	return conn.ConnectionState(), nil
}

// putEventually writes value at path, again after an unknown outcome (a
// leader change while it was pending): the write is idempotent.
func putEventually(t *testing.T, c *client.Client, path, value string) {
	t.Helper()
	waitFor(t, 30*time.Second, "a put of "+path+" to succeed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Put(ctx, path, value)
		if err != nil {
			t.Logf("put %s: %v", path, err)
		}
		return err == nil
	})
}

// tlsClient returns a latch client of urls with the cluster's test client certificate.
func tlsClient(t *testing.T, cluster *proccluster.Cluster, urls []string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Endpoints: urls, TLS: cluster.Security.ClientTLS(t), MaxAttempts: 20, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitStale waits until member i serves path with value from its own state.
func waitStale(t *testing.T, cluster *proccluster.Cluster, i int, path, value string) {
	t.Helper()
	c := tlsClient(t, cluster, []string{cluster.Members[i].ClientURL})
	waitFor(t, 30*time.Second, cluster.Members[i].Name+" to have "+path, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		node, err := c.Get(ctx, path, client.Stale())
		return err == nil && node.Value == value
	})
}

// servedSerial returns the serial of the certificate addr presents in a
// fresh handshake.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
