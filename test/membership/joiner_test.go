package membership

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/latch-io/latch/internal/testkit/freeport"
)

// joiner is a latchd process started with --initial-cluster-state existing
// (internal/testkit/proccluster starts only initial members). It is killed by its
// PID and reaped in t.Cleanup.
type joiner struct {
	name      string
	clientURL string
	peerAddr  string
	dataDir   string
	logPath   string
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error // how the process ended; read after exited is closed
}

// newJoiner picks member name's addresses and directories; start runs it.
func newJoiner(t *testing.T, name string) *joiner {
	t.Helper()
	dir := t.TempDir()
	return &joiner{
		name: name, clientURL: "http://" + freeport.Addr(t), peerAddr: freeport.Addr(t),
		dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{}),
	}
}

// start runs bin as the member joining the cluster whose peers are given as
// name=host:port (initial), with extra flags appended.
func (j *joiner) start(t *testing.T, bin, initial string, extra ...string) {
	t.Helper()
	name := j.name
	args := append([]string{
		"--name", name, "--data-dir", j.dataDir,
		"--listen-client", strings.TrimPrefix(j.clientURL, "http://"), "--listen-peer", j.peerAddr,
		"--initial-cluster", initial + "," + name + "=" + j.peerAddr,
		"--initial-cluster-state", "existing", "--log-level", "info",
	}, extra...)
	logFile, err := os.Create(j.logPath)
	if err != nil {
		t.Fatalf("log of %s: %v", name, err)
	}
	defer logFile.Close()
	j.cmd = exec.Command(bin, args...)
	j.cmd.Stdout, j.cmd.Stderr = logFile, logFile
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.exited) }()
	t.Cleanup(func() {
		_ = j.cmd.Process.Signal(syscall.SIGKILL)
		<-j.exited
		if t.Failed() {
			j.logTail(t)
		}
	})
}

func (j *joiner) log() string {
	data, _ := os.ReadFile(j.logPath)
	return string(data)
}

func (j *joiner) logTail(t *testing.T) {
	data := j.log()
	if len(data) > 6000 {
		data = data[len(data)-6000:]
	}
	t.Logf("log of %s (tail):\n%s", j.name, data)
}
