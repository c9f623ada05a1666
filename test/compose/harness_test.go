package compose

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
	"github.com/latch-io/latch/internal/testkit/freeport"
)

// project is one docker-compose project started by a test.
type project struct {
	t     *testing.T
	name  string
	file  string            // docker-compose.yml of the repository
	env   []string          // LATCH_IMAGE and the published ports
	ports map[string]string // service -> host client URL
}

// services publishing a client port, with the variable naming the host port.
var portVariables = map[string]string{
	"n1": "LATCH_N1_PORT", "n2": "LATCH_N2_PORT", "n3": "LATCH_N3_PORT",
	"o1": "LATCH_O1_PORT", "n4": "LATCH_N4_PORT",
}

// requireDocker skips the test when Docker or docker-compose is unusable.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("compose: skipped with -short (starts containers)")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("compose: docker is not usable here (docker info: %v): %.200s", err, out)
	}
	if out, err := exec.Command("docker-compose", "version").CombinedOutput(); err != nil {
		t.Skipf("compose: docker-compose is not usable here: %v: %.200s", err, out)
	}
}

// buildImage compiles static latchd and latchctl and builds the image from
// a context holding just them; the project's down removes it.
func buildImage(t *testing.T, tag string) {
	t.Helper()
	context := t.TempDir()
	for _, binary := range []string{"latchd", "latchctl"} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(context, binary), "github.com/latch-io/latch/cmd/"+binary)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build static %s: %v\n%s", binary, err, out)
		}
	}
	dockerfile, err := filepath.Abs("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "build", "--quiet", "-f", dockerfile, "-t", tag, context).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
}

// newProject prepares a uniquely named project using the image
// "latch-test:<project>", with free host ports; `down -v` runs in t.Cleanup
// even if up never ran.
func newProject(t *testing.T) *project {
	t.Helper()
	file, err := filepath.Abs("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := &project{t: t, name: "latchtest" + randomSuffix(), file: file}
	p.pickPorts()
	t.Cleanup(p.down)
	return p
}

// pickPorts chooses free host ports for the services' published ports.
func (p *project) pickPorts() {
	p.env = append(os.Environ(), "LATCH_IMAGE="+p.image())
	p.ports = map[string]string{}
	for service := range portVariables {
		p.pickPort(service)
	}
}

// pickPort chooses a free host port for one service's published port (a
// later value of the variable in p.env wins over an earlier one).
func (p *project) pickPort(service string) {
	port := freeport.Ports(p.t, 1)[0]
	p.env = append(p.env, portVariables[service]+"="+strconv.Itoa(port))
	p.ports[service] = fmt.Sprintf("http://127.0.0.1:%d", port)
}

// portTaken reports whether docker-compose failed because a published
// port chosen free was bound by someone else before Docker bound it.
func portTaken(output string) bool {
	return strings.Contains(output, "address already in use") || strings.Contains(output, "port is already allocated")
}

// up starts the project. A port chosen free can be taken by another test
// process before Docker binds it; then the project is taken down and
// started again on other ports (three attempts).
func (p *project) up() {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := p.compose(2*time.Minute, "up", "-d")
		if err == nil {
			return
		}
		if attempt == 3 || !portTaken(out+err.Error()) {
			p.t.Fatalf("docker-compose up -d: %v\n%s", err, out)
		}
		p.t.Logf("a published port was taken meanwhile; starting again on other ports")
		_, _ = p.compose(2*time.Minute, "down", "-v")
		p.pickPorts()
	}
}

// startService starts one more service of the running project. Its port
// was chosen free when the project was made, and may have been taken since
// (any process's outgoing connection can get it as its local port): then
// it is started on another (three attempts), and p.ports names the new one.
func (p *project) startService(service string) {
	p.t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := p.compose(2*time.Minute, "up", "-d", "--no-deps", service)
		if err == nil {
			return
		}
		if attempt == 3 || !portTaken(out+err.Error()) {
			p.t.Fatalf("docker-compose up -d --no-deps %s: %v\n%s", service, err, out)
		}
		p.t.Logf("%s's published port was taken meanwhile; starting it on another", service)
		p.pickPort(service)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strconv.Itoa(os.Getpid()) + hex.EncodeToString(b)
}

// image is the tag of the image the project runs.
func (p *project) image() string { return "latch-test:" + p.name }

// compose runs docker-compose with the project's file, name and variables.
func (p *project) compose(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-f", p.file, "-p", p.name}, args...)...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker-compose %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// must runs docker-compose and fails the test on error.
func (p *project) must(timeout time.Duration, args ...string) string {
	p.t.Helper()
	out, err := p.compose(timeout, args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// latchctl runs latchctl inside service's container, on the compose
// network, where member addresses and leader hints resolve.
func (p *project) latchctl(service string, args ...string) (string, error) {
	endpoints := "http://n1:2379,http://n2:2379,http://n3:2379,http://o1:2379,http://n4:2379"
	full := append([]string{"exec", "-T", service, "/latchctl", "--endpoints", endpoints, "--command-timeout", "60s"}, args...)
	return p.compose(90*time.Second, full...)
}

// down removes the project's containers, network, volumes and image,
// printing the members' logs first when the test failed.
func (p *project) down() {
	if p.t.Failed() {
		if out, err := p.compose(time.Minute, "logs", "--no-color", "--tail", "60"); err == nil {
			p.t.Logf("compose logs:\n%s", out)
		}
	}
	if _, err := p.compose(3*time.Minute, "--profile", "replacement", "down", "-v", "--remove-orphans", "-t", "2"); err != nil {
		p.t.Errorf("cleanup: %v", err)
	}
	if out, err := exec.Command("docker", "image", "ls", "-q", p.image()).Output(); err == nil && len(out) > 0 {
		if out, err := exec.Command("docker", "rmi", p.image()).CombinedOutput(); err != nil {
			p.t.Errorf("cleanup: docker rmi %s: %v: %s", p.image(), err, out)
		}
	}
}

// status asks one service for GET /v1/status through its published port.
func (p *project) status(ctx context.Context, service string) (*api.Status, error) {
	c, err := client.New(client.Config{Endpoints: []string{p.ports[service]}, MaxAttempts: 1, RequestTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.StatusOf(ctx, p.ports[service])
}

// leaderName returns the name of the leader service agrees on ("" if none).
func (p *project) leaderName(ctx context.Context, service string) string {
	st, err := p.status(ctx, service)
	if err != nil || st.LeaderID == "" {
		return ""
	}
	for _, m := range st.Members {
		if m.ID == st.LeaderID {
			return m.Name
		}
	}
	return ""
}
