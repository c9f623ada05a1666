package fanout

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/latch-io/latch/internal/testkit/proccluster"
)

// profiles are the CPU profiles taken during one case's writes: one per
// member, fetched from its /debug/pprof/profile, and one of this process.
type profiles struct {
	t       *testing.T
	self    *os.File // this process's profile, nil when not profiling
	members sync.WaitGroup
}

// startProfiles starts the profiles of a case into dir, named after the
// case (name) and the member's position in urls; with dir "" it does
// nothing.
func startProfiles(t *testing.T, dir, name string, urls []string) *profiles {
	p := &profiles{t: t}
	if dir == "" {
		return p
	}
	seconds := 8
	if n, err := strconv.Atoi(os.Getenv("LATCH_FANOUT_PROFILE_SECONDS")); err == nil && n > 0 {
		seconds = n
	}
	for i, u := range urls {
		// The heap as the watches left it, before the writes: gc=1 makes
		// the member collect first, so the profile is the live heap, not
		// the heap of whatever collection ran last (mid-registration).
		// The profiled run's writes then start after that collection.
		heap := filepath.Join(dir, fmt.Sprintf("%s-member%d.heap.pprof", name, i))
		if err := fetchPprof(u+"/debug/pprof/heap?gc=1", heap); err != nil {
			t.Errorf("heap profile of %s: %v", u, err)
		}
	}
	for i, u := range urls {
		p.members.Add(1)
		go func() {
			defer p.members.Done()
			file := filepath.Join(dir, fmt.Sprintf("%s-member%d.pprof", name, i))
			if err := fetchProfile(u, seconds, file); err != nil {
				t.Errorf("profile of %s: %v", u, err)
			}
		}()
	}
	f, err := os.Create(filepath.Join(dir, name+"-watchers.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	p.self = f
	return p
}

// stop ends this process's profile and waits for the members'.
func (p *profiles) stop() {
	if p.self == nil {
		return
	}
	pprof.StopCPUProfile()
	if err := p.self.Close(); err != nil {
		p.t.Error(err)
	}
	p.self = nil // stop is called again by a test's teardown
	p.members.Wait()
}

// fetchProfile writes the CPU profile of the member at base, taken over
// seconds, to file.
func fetchProfile(base string, seconds int, file string) error {
	return fetchPprof(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds), file)
}

// fetchPprof writes the profile url serves to file.
func fetchPprof(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAverage returns the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(b))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

// cpuMeter reads the CPU time (user and system) the members and this
// process (the watchers) have used, from /proc/PID/stat.
type cpuMeter struct {
	members []int // process ids
}

// meterOf measures c's members (as they run now) and this process.
func meterOf(c *proccluster.Cluster) cpuMeter {
	var m cpuMeter
	for _, member := range c.Members {
		m.members = append(m.members, member.PID())
	}
	return m
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// read returns the members' CPU seconds, summed, and this process's.
func (m cpuMeter) read(t *testing.T) (members, self float64) {
	for _, pid := range m.members {
		members += cpuSeconds(t, pid)
	}
	return members, cpuSeconds(t, os.Getpid())
}

// cpuSeconds is process pid's user and system CPU time so far.
func cpuSeconds(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 12th and 13th of them.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 13 {
		t.Fatalf("/proc/%d/stat: %d fields after the command", pid, len(fields))
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: utime %q, stime %q", pid, fields[11], fields[12])
	}
	return (utime + stime) / clockTicks
}

// logPer logs the CPU time per notification spent since before (from
// read) by the members and by this process, over n notifications.
func (m cpuMeter) logPer(t *testing.T, what string, beforeMembers, beforeSelf float64, n int) {
	t.Helper()
	members, self := m.read(t)
	t.Logf("%s: CPU per notification: members %.1f µs, watchers' process %.1f µs (%d notifications)",
		what, (members-beforeMembers)*1e6/float64(n), (self-beforeSelf)*1e6/float64(n), n)
}
