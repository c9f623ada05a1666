package proccluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A network-namespace cluster puts each member in its own namespace
// (latch-<pid>-<k>-n<i>) with one veth pair joined to a bridge (lb<pid><k>)
// in the root namespace, on a private /24. The test process reaches every
// member through the bridge address (.254). Partitions are iptables DROP
// rules in a member's namespace, on the INPUT chain, matching the source
// address of another member: they cut peer traffic and leave client traffic
// from the bridge alone. Names carry the owning test process's PID so that
// leftovers of a dead test binary are removed at the next Start, and those
// of a live one never are.

// ErrNoNetns means network namespaces cannot be used here (not root, no ip
// tool, or the kernel refuses).
var ErrNoNetns = errors.New("proccluster: network namespaces unavailable")

// ErrNoPartitions means the cluster runs on loopback, where partitions
// cannot be made.
var ErrNoPartitions = errors.New("proccluster: partitions need a netns cluster")

var (
	netnsProbe     sync.Once
	netnsProbeErr  error
	netnsCounter   int        // clusters made by this process; guarded by netnsMu
	netnsMu        sync.Mutex // guards netnsCounter and liveNetworks
	liveNetworks   = map[*network]bool{}
	signalsHandled sync.Once
)

// NetnsAvailable reports whether Start can make a namespace cluster: it
// creates and deletes a probe namespace once per process.
func NetnsAvailable() error {
	netnsProbe.Do(func() {
		if os.Geteuid() != 0 {
			netnsProbeErr = fmt.Errorf("%w: not root", ErrNoNetns)
			return
		}
		for _, tool := range []string{"ip", "iptables"} {
			if _, err := exec.LookPath(tool); err != nil {
				netnsProbeErr = fmt.Errorf("%w: %v", ErrNoNetns, err)
				return
			}
		}
		name := fmt.Sprintf("latch-%d-probe", os.Getpid())
		if err := run("ip", "netns", "add", name); err != nil {
			netnsProbeErr = fmt.Errorf("%w: %v", ErrNoNetns, err)
			return
		}
		if err := run("ip", "netns", "del", name); err != nil {
			netnsProbeErr = fmt.Errorf("%w: %v", ErrNoNetns, err)
		}
	})
	return netnsProbeErr
}

// network is the namespaces, veth pairs and bridge of one cluster.
type network struct {
	prefix  string // latch-<pid>-<k>
	bridge  string // lb<pid hex><k hex>
	subnet  string // a.b.c, the first three octets
	members int

	mu      sync.Mutex // guards removed
	removed bool
}

func (n *network) namespace(i int) string { return fmt.Sprintf("%s-n%d", n.prefix, i+1) }
func (n *network) address(i int) string   { return fmt.Sprintf("%s.%d", n.subnet, i+1) }
func (n *network) veth(i int) string      { return fmt.Sprintf("%sv%x", n.bridge, i) }
func (n *network) vethPeer(i int) string  { return fmt.Sprintf("%sp%x", n.bridge, i) }

// newNetwork makes the bridge and one namespace per member. On error it
// removes what it made.
func newNetwork(members int) (*network, error) {
	if err := NetnsAvailable(); err != nil {
		return nil, err
	}
	removeLeftovers()
	handleSignals()
	netnsMu.Lock()
	netnsCounter++
	k := netnsCounter
	netnsMu.Unlock()
	pid := os.Getpid()
	n := &network{
		prefix:  fmt.Sprintf("latch-%d-%d", pid, k),
		bridge:  fmt.Sprintf("lb%x%x", pid, k%16),
		subnet:  fmt.Sprintf("10.%d.%d", 64+(pid>>8)%128, (pid+k*37)%256),
		members: members,
	}
	netnsMu.Lock()
	liveNetworks[n] = true
	netnsMu.Unlock()
	if err := n.create(); err != nil {
		n.remove()
		return nil, err
	}
	return n, nil
}

func (n *network) create() error {
	steps := [][]string{
		{"ip", "link", "add", n.bridge, "type", "bridge"},
		{"ip", "addr", "add", n.subnet + ".254/24", "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
		append([]string{"iptables", "-w", "-I"}, n.forwardRule()...),
	}
	for i := range n.members {
		ns := n.namespace(i)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", n.veth(i), "type", "veth", "peer", "name", n.vethPeer(i)},
			[]string{"ip", "link", "set", n.vethPeer(i), "netns", ns},
			[]string{"ip", "link", "set", n.veth(i), "master", n.bridge},
			[]string{"ip", "link", "set", n.veth(i), "up"},
			[]string{"ip", "netns", "exec", ns, "ip", "addr", "add", n.address(i) + "/24", "dev", n.vethPeer(i)},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", n.vethPeer(i), "up"},
			[]string{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
		)
	}
	for _, step := range steps {
		if err := run(step...); err != nil {
			return fmt.Errorf("make network %s: %w", n.prefix, err)
		}
	}
	return nil
}

// remove deletes the namespaces (and so their veth pairs) and the bridge;
// it may be called again.
func (n *network) remove() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed {
		return
	}
	n.removed = true
	for i := range n.members {
		_ = run("ip", "netns", "del", n.namespace(i))
	}
	_ = run("ip", "link", "del", n.bridge)
	_ = run(append([]string{"iptables", "-w", "-D"}, n.forwardRule()...)...)
	netnsMu.Lock()
	delete(liveNetworks, n)
	netnsMu.Unlock()
}

// forwardRule accepts traffic between the bridge's ports in the root
// namespace's FORWARD chain: where br_netfilter is loaded (Docker loads it
// and sets FORWARD to DROP), bridged packets pass through that chain.
func (n *network) forwardRule() []string {
	return []string{"FORWARD", "-i", n.bridge, "-o", n.bridge, "-m", "comment", "--comment", n.prefix, "-j", "ACCEPT"}
}

// block drops, in member to's namespace, every packet from member from.
func (n *network) block(from, to int) error {
	return run("ip", "netns", "exec", n.namespace(to), "iptables", "-w", "-A", "INPUT", "-s", n.address(from), "-j", "DROP")
}

// heal removes every rule of every member's namespace.
func (n *network) heal() error {
	var errs []error
	for i := range n.members {
		errs = append(errs, run("ip", "netns", "exec", n.namespace(i), "iptables", "-w", "-F", "INPUT"))
	}
	return errors.Join(errs...)
}

func run(args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

var leftoverName = regexp.MustCompile(`^latch-(\d+)-`)

// removeLeftovers deletes namespaces and bridges left by test processes
// that no longer run (a test binary killed before its cleanup).
func removeLeftovers() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	deadBridges := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m := leftoverName.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if processAlive(pid) {
			continue
		}
		_ = run("ip", "netns", "del", fields[0])
		deadBridges[fmt.Sprintf("lb%x", pid)] = true
	}
	removeLeftoverRules()
	links, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(links), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name := strings.TrimSuffix(fields[1], ":")
		for prefix := range deadBridges {
			if strings.HasPrefix(name, prefix) && len(name) == len(prefix)+1 {
				_ = run("ip", "link", "del", name)
			}
		}
	}
}

// removeLeftoverRules deletes FORWARD rules whose comment names a test
// process that no longer runs.
func removeLeftoverRules() {
	out, err := exec.Command("iptables", "-w", "-S", "FORWARD").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "-A" {
			continue
		}
		for i, field := range fields {
			m := leftoverName.FindStringSubmatch(strings.Trim(field, `"`))
			if m == nil || i == 0 || fields[i-1] != "--comment" {
				continue
			}
			if pid, _ := strconv.Atoi(m[1]); !processAlive(pid) {
				args := append([]string{"iptables", "-w", "-D"}, fields[1:]...)
				for j := range args {
					args[j] = strings.Trim(args[j], `"`)
				}
				_ = run(args...)
			}
		}
	}
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// handleSignals removes this process's networks on SIGINT or SIGTERM
// before exiting, since t.Cleanup does not run then.
func handleSignals() {
	signalsHandled.Do(func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-signals
			netnsMu.Lock()
			var networks []*network
			for n := range liveNetworks {
				networks = append(networks, n)
			}
			netnsMu.Unlock()
			killTracked()
			for _, n := range networks {
				n.remove()
			}
			fmt.Fprintf(os.Stderr, "proccluster: removed %d networks on %v\n", len(networks), sig)
			os.Exit(2)
		}()
	})
}

var (
	trackedMu sync.Mutex                        // guards tracked
	tracked   = map[*os.Process]chan struct{}{} // started and not yet reaped
)

// track remembers a started process until untrack, when it is reaped, so
// that the signal handler can kill it; exited is closed once it is reaped.
func track(proc *os.Process, exited chan struct{}) {
	trackedMu.Lock()
	tracked[proc] = exited
	trackedMu.Unlock()
}

// untrack forgets a reaped process.
func untrack(proc *os.Process) {
	trackedMu.Lock()
	delete(tracked, proc)
	trackedMu.Unlock()
}

// killTracked sends SIGKILL to every process this package started and
// still runs, and waits for them to be reaped.
func killTracked() {
	trackedMu.Lock()
	var waits []chan struct{}
	for proc, exited := range tracked {
		_ = proc.Signal(syscall.SIGKILL)
		waits = append(waits, exited)
	}
	trackedMu.Unlock()
	for _, exited := range waits {
		<-exited
	}
}
