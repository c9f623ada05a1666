package recipes_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// The test binary is also the program that 'latchctl lock' and 'latchctl
// elect' run while they hold: with helperEnv set, TestMain runs the writer
// instead of the tests.
const (
	helperEnv   = "LATCH_RECIPES_HELPER"   // "writer" runs runWriter
	resourceEnv = "LATCH_RECIPES_RESOURCE" // URL the writer writes to
	writerEnv   = "LATCH_RECIPES_WRITER"   // the writer's name in the resource's log
	ordersEnv   = "LATCH_RECIPES_ORDERS"   // file whose presence orders one more write
	tokenEnv    = "LATCH_FENCING_TOKEN"    // set by latchctl (cli.EnvFencingToken)
)

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runHelper(role))
	}
	code := m.Run()
	proccluster.RemoveBuild()
	os.Exit(code)
}

func runHelper(role string) int {
	if role != "writer" {
		fmt.Fprintf(os.Stderr, "recipes helper: unknown role %q\n", role)
		return 2
	}
	return runWriter(os.Getenv(resourceEnv), os.Getenv(writerEnv), os.Getenv(ordersEnv), os.Getenv(tokenEnv))
}

// runWriter is the program a lock or a leadership protects. It writes to
// the resource once when it starts, with the fencing token latchctl gave
// it, and prints each outcome. An order to write once more is a file at
// orders: the writer looks for it on every SIGUSR1 and, before it exits,
// on SIGTERM (latchctl lost the lock, or is stopping), and makes the write
// (removing the file) if it is there. An order given while the process is
// stopped is therefore written as soon as it runs again, whatever latchctl
// does meanwhile and in whichever order the two signals reach the writer
// (the Go runtime may hand over SIGTERM before an earlier SIGUSR1). That is
// the paused holder's stale write.
func runWriter(url, name, orders, token string) int {
	usr1 := make(chan os.Signal, 16)
	signal.Notify(usr1, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	seq := 0
	write := func(what string) {
		seq++
		status, err := postWrite(url, writeRequest{Writer: name, PID: os.Getpid(), Seq: seq, What: what}, token)
		fmt.Printf("writer %s: %s write %d with token %s: status %d %v\n", name, what, seq, token, status, err)
	}
	obey := func() {
		if orders != "" && os.Remove(orders) == nil {
			write("signal")
		}
	}
	write("start")
	for {
		select {
		case <-usr1:
			obey()
		case <-term:
			obey()
			return 0
		}
	}
}

// writeRequest is the body of a write to the protected resource.
type writeRequest struct {
	Writer string `json:"writer"`
	PID    int    `json:"pid"`
	Seq    int    `json:"seq"`
	What   string `json:"what"`
}

// writeClient sends writes to the resource, from the helper and the tests.
var writeClient = &http.Client{Timeout: 10 * time.Second}

// postWrite sends one write with its fencing token and returns the status.
func postWrite(url string, w writeRequest, token string) (int, error) {
	body, err := json.Marshal(w)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(api.HeaderFencingToken, token)
	resp, err := writeClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// postWriteToken is postWrite with a numeric token.
func postWriteToken(url string, w writeRequest, token uint64) (int, error) {
	return postWrite(url, w, strconv.FormatUint(token, 10))
}
