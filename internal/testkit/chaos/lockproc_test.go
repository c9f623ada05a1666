package chaos

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/check"
)

// TestLockProcChecker drives the lockproc resource over HTTP with scripted
// writes, as client processes would, and checks what its checker finds.
// No cluster: a step either writes (pid, token) or marks that pid was
// stopped after its write with token and is now resumed.
func TestLockProcChecker(t *testing.T) {
	type step struct {
		pid    int
		token  uint64
		resume bool // instead of writing: pid, stopped after token, resumes now
	}
	tests := []struct {
		name      string
		unchecked bool
		steps     []step
		anomalies []string // prefixes, in any order; none means a clean run
		stale     int      // resumed holders that wrote with their old token
		refused   int      // of those, refused
	}{
		{
			name:  "resumed holder refused",
			steps: []step{{pid: 1, token: 5}, {pid: 2, token: 9}, {pid: 1, token: 5, resume: true}, {pid: 1, token: 5}, {pid: 2, token: 9}},
			stale: 1, refused: 1,
		},
		{
			name:  "resumed holder starts a new tenure",
			steps: []step{{pid: 1, token: 5}, {pid: 2, token: 9}, {pid: 1, token: 5, resume: true}, {pid: 1, token: 12}},
		},
		{
			name:      "unchecked guard accepts the resumed holder",
			unchecked: true,
			steps:     []step{{pid: 1, token: 5}, {pid: 2, token: 9}, {pid: 1, token: 5, resume: true}, {pid: 1, token: 5}},
			anomalies: []string{"F: guard accepted token 5 after token 9", "F: lock client 1"},
			stale:     1,
		},
		{
			name:      "one token from two processes",
			steps:     []step{{pid: 1, token: 5}, {pid: 2, token: 5}},
			anomalies: []string{"F: fencing token 5 written by client processes 1 and 2"},
		},
		{
			name:      "one writer only",
			steps:     []step{{pid: 1, token: 5}, {pid: 1, token: 6}},
			anomalies: []string{"liveness: lockproc: writes accepted from 1 client processes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			report := Report{Faults: map[string]int{}}
			r := &run{Run: check.NewRun(check.Options{Logf: t.Logf}, &report)}
			w := &lockProcs{unchecked: tt.unchecked}
			if err := w.serve(); err != nil {
				t.Fatal(err)
			}
			defer w.server.Close()
			for _, s := range tt.steps {
				if s.resume {
					w.pauses = append(w.pauses, holderPause{pid: s.pid, token: s.token, moved: true,
						highest: w.guard.Highest(lockProcResource), resumed: time.Now()})
					continue
				}
				postTestWrite(t, w.url, s.pid, s.token)
			}
			if err := w.check(r); err != nil {
				t.Fatal(err)
			}
			if report.ResumedStaleWrites != tt.stale || report.ResumedRefused != tt.refused {
				t.Errorf("resumed stale writes %d, refused %d; want %d, %d", report.ResumedStaleWrites, report.ResumedRefused, tt.stale, tt.refused)
			}
			if len(report.Anomalies) != len(tt.anomalies) {
				t.Fatalf("anomalies %q, want %d with prefixes %q", report.Anomalies, len(tt.anomalies), tt.anomalies)
			}
			for _, prefix := range tt.anomalies {
				if !hasPrefix(report.Anomalies, prefix) {
					t.Errorf("no anomaly %q in %q", prefix, report.Anomalies)
				}
			}
		})
	}
}

func postTestWrite(t *testing.T, url string, pid int, token uint64) {
	t.Helper()
	if err := sendTestWrite(url, pid, token); err != nil {
		t.Fatal(err)
	}
}

// sendTestWrite writes to the resource at url as client pid with token.
func sendTestWrite(url string, pid int, token uint64) error {
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(api.HeaderFencingToken, strconv.FormatUint(token, 10))
	req.Header.Set(writerPIDHeader, strconv.Itoa(pid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("write pid %d token %d: %w", pid, token, err)
	}
	return resp.Body.Close()
}

func hasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// TestLockProcWaits checks the waits of the pause-lock-holder fault on
// scripted writes: holderAtWork finds only a first write with a new token,
// and waitWrite a matching write made while it waits.
func TestLockProcWaits(t *testing.T) {
	w := &lockProcs{}
	if err := w.serve(); err != nil {
		t.Fatal(err)
	}
	defer w.server.Close()
	postTestWrite(t, w.url, 1, 5)
	postTestWrite(t, w.url, 1, 5)
	if holder, _, ok := w.holderAtWork(50 * time.Millisecond); ok {
		t.Fatalf("holderAtWork found %+v, but token 5's holder has written twice", holder)
	}
	postTestWrite(t, w.url, 2, 9)
	holder, writes, ok := w.holderAtWork(time.Second)
	if !ok || holder.pid != 2 || holder.token != 9 || writes != 3 {
		t.Fatalf("holderAtWork = %+v, %d writes, %v; want pid 2 token 9 after 3 writes", holder, writes, ok)
	}
	moved := func(write procWrite) bool { return write.accepted() && write.pid != 2 && write.token > 9 }
	if w.waitWrite(writes, 50*time.Millisecond, moved) {
		t.Fatal("waitWrite found a write above token 9 from another client before any was made")
	}
	posted := make(chan error, 1)
	go func() { posted <- sendTestWrite(w.url, 1, 12) }()
	found := w.waitWrite(writes, 10*time.Second, moved)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("waitWrite missed pid 1's write with token 12")
	}
}
