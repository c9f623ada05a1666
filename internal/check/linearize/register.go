package linearize

import (
	"errors"
	"math/rand/v2"
	"syscall"

	"github.com/latch-io/latch/api"
)

// The helpers below are the shared half of a register workload against a
// real cluster (internal/testkit/testcluster's checker L, test/membership): how a
// client picks its next operation and how the cluster's answer ends the
// recorded call. Sending the operation stays with the caller.

// Settlement says how Settle ended a call.
type Settlement int

const (
	// Settled: a definite outcome, recorded with Return.
	Settled Settlement = iota
	// LeftOpen: a write whose outcome is unknown, recorded open; the client
	// must continue under a new client id (Recorder.NewClient).
	LeftOpen
	// Dropped: a failed read, or a write that never reached a server.
	Dropped
)

// RandomInput picks one client's next operation on key: half reads, a
// quarter puts and a quarter CASes expecting the version the client last
// saw of key (versions, as Observe keeps it). Writes carry newValue(), which
// must be unique in the history.
func RandomInput(random *rand.Rand, key string, versions map[string]uint64, newValue func() string) Input {
	switch r := random.IntN(100); {
	case r < 50:
		return Input{Kind: Get, Key: key}
	case r < 75:
		return Input{Kind: Put, Key: key, Value: newValue()}
	default:
		return Input{Kind: CAS, Key: key, Value: newValue(), Expect: versions[key]}
	}
}

// Observe records in versions the version a settled operation saw or made
// (a refused CAS made none).
func Observe(versions map[string]uint64, in Input, out Output) {
	if in.Kind == Get || !out.Refused {
		versions[in.Key] = out.Version
	}
}

// Settle ends call with what the cluster answered: node on success, else
// err. A 404 read sees no key and a 412 CAS is refused (both settled); any
// other failed read, a refused connection or a 429 was never applied
// (dropped); any other failed write may have been (left open).
func (c *Call) Settle(node api.Node, err error) (Output, Settlement) {
	var out Output
	kind := c.input.Kind
	switch {
	case err == nil && kind == Get:
		out = Output{Found: true, Value: node.Value, Version: node.Version}
	case err == nil:
		out = Output{Version: node.Version}
	case kind == Get && api.CodeOf(err) == api.CodeNotFound:
		out = Output{}
	case kind == CAS && api.CodeOf(err) == api.CodePreconditionFailed:
		out = Output{Refused: true}
	case kind == Get, errors.Is(err, syscall.ECONNREFUSED), api.CodeOf(err) == api.CodeOverloaded:
		// A failed read observed nothing; a refused connection or a 429
		// means the write was never proposed.
		c.Drop()
		return out, Dropped
	default:
		c.Unknown()
		return out, LeftOpen
	}
	c.Return(out)
	return out, Settled
}
