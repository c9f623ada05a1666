package httpapi

import (
	"net/url"
	"strconv"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
	"github.com/latch-io/latch/internal/server"
)

// params reads query parameters strictly: each parameter may appear once,
// and only those the endpoint allows.
type params struct {
	values url.Values
	err    error
}

func newParams(q url.Values, allowed ...string) *params {
	p := &params{values: q}
	for name, vs := range q {
		if !contains(allowed, name) {
			p.fail(api.Errorf(api.CodeInvalidArgument, "unknown parameter %q", name))
		} else if len(vs) > 1 {
			p.fail(api.Errorf(api.CodeInvalidArgument, "parameter %q given %d times", name, len(vs)))
		}
	}
	return p
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *params) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *params) bool(name string) bool {
	switch v := p.values.Get(name); v {
	case "", "false":
		return false
	case "true":
		return true
	default:
		p.fail(api.Errorf(api.CodeInvalidArgument, "parameter %s=%q is not true or false", name, v))
		return false
	}
}

func (p *params) uint(name string) uint64 {
	v := p.values.Get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		p.fail(api.Errorf(api.CodeInvalidArgument, "parameter %s=%q is not an unsigned integer", name, v))
	}
	return n
}

func (p *params) id(name string) uint64 {
	v := p.values.Get(name)
	if v == "" {
		return 0
	}
	id, err := api.ParseID(v)
	if err != nil {
		p.fail(err)
	}
	return id
}

// precondition reads prev_version=<N>|any|none.
func (p *params) precondition() (command.Precondition, uint64) {
	switch v := p.values.Get("prev_version"); v {
	case "", "any":
		return command.PrecondAny, 0
	case "none":
		return command.PrecondNone, 0
	default:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			p.fail(api.Errorf(api.CodeInvalidArgument, "prev_version=%q is not a positive version, any or none", v))
		}
		return command.PrecondVersion, n
	}
}

// readOptions reads consistency=linearizable|stale and min_index.
func (p *params) readOptions() server.ReadOptions {
	opts := server.ReadOptions{Consistency: api.Linearizable, MinIndex: p.uint("min_index")}
	switch v := p.values.Get("consistency"); v {
	case "", api.Linearizable:
	case api.Stale:
		opts.Consistency = api.Stale
	default:
		p.fail(api.Errorf(api.CodeInvalidArgument, "consistency=%q is not linearizable or stale", v))
	}
	return opts
}

// session reads session_id and request_seq; a request_seq needs a session.
func (p *params) session() (sessionID, requestSeq uint64) {
	sessionID, requestSeq = p.id("session_id"), p.uint("request_seq")
	if requestSeq != 0 && sessionID == 0 {
		p.fail(api.Errorf(api.CodeInvalidArgument, "request_seq needs a session_id"))
	}
	return sessionID, requestSeq
}
