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
	p.members.Wait()
}

// fetchProfile writes the CPU profile of the member at base, taken over
// seconds, to file.
func fetchProfile(base string, seconds int, file string) error {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds))
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
