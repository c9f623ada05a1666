package chaos

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latch-io/latch/api"
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
			r := &run{report: &report, logf: t.Logf}
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
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderFencingToken, strconv.FormatUint(token, 10))
	req.Header.Set(writerPIDHeader, strconv.Itoa(pid))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("write pid %d token %d: %v", pid, token, err)
	}
	resp.Body.Close()
}

func hasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
