package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
)

// params reads query parameters strictly: each parameter may appear once,
// and only those the endpoint allows.
type params struct {
	values url.Values
	err    error
}

// queryOf returns r's query parameters, refusing a query that
// url.ParseQuery cannot read whole: r.URL.Query() drops a pair it cannot
// read (one joined by ';', one with a malformed %-escape) without a word,
// and a parameter with it.
func queryOf(r *http.Request) (url.Values, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "malformed query %q: %v (join parameters with '&', escape with %%XX)", r.URL.RawQuery, err)
	}
	return q, nil
}

// requestParams reads r's query (queryOf) for an endpoint that takes the
// allowed parameters.
func requestParams(r *http.Request, allowed ...string) *params {
	q, err := queryOf(r)
	p := newParams(q, allowed...)
	if err != nil {
		p.err = err
	}
	return p
}

// newParams reads q, the query of an endpoint that takes the allowed
// parameters.
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

// uint reads an unsigned integer parameter no larger than api.MaxInteger.
func (p *params) uint(name string) uint64 {
	v := p.values.Get(name)
	if v == "" {
		return 0
	}
	n, err := parseInteger(v)
	if err != nil {
		p.fail(api.Errorf(api.CodeInvalidArgument, "parameter %s=%q %v", name, v, err))
	}
	return n
}

// parseInteger parses a decimal integer from 0 to api.MaxInteger; the error
// completes a sentence about the value.
func parseInteger(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > api.MaxInteger {
		return 0, fmt.Errorf("is not an integer from 0 to %d", uint64(api.MaxInteger))
	}
	return n, nil
}

func (p *params) id(name string) uint64 {
	v := p.values.Get(name)
	if v == "" {
		return 0
	}
	id, err := parseID(name, v)
	if err != nil {
		p.fail(err)
	}
	return id
}

// parseID parses the id given as field (a parameter, a body field or a path
// segment), saying which one is missing or malformed.
func parseID(field, s string) (uint64, error) {
	if s == "" {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s is required", field)
	}
	id, err := api.ParseID(s)
	if err != nil {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s %q is not an id (want 0x and 1 to 16 hex digits, not all zero)", field, s)
	}
	return id, nil
}

// precondition reads prev_version=<N>|any|none; 0 means none (the node must
// not exist), as a node's versions start at 1.
func (p *params) precondition() (server.Precondition, uint64) {
	switch v := p.values.Get("prev_version"); v {
	case "", "any":
		return server.AnyVersion, 0
	case "none", "0":
		return server.NoNode, 0
	default:
		n, err := parseInteger(v)
		if err != nil {
			p.fail(api.Errorf(api.CodeInvalidArgument, "prev_version=%q is not a version (1 to %d), any, none or 0", v, uint64(api.MaxInteger)))
		}
		return server.AtVersion, n
	}
}

// readOptions reads consistency=linearizable|stale and min_index.
func (p *params) readOptions() server.ReadOptions {
	opts := server.ReadOptions{Consistency: api.Linearizable}
	if v := p.values.Get("min_index"); strings.Contains(v, ":") {
		opts.MinIndexes = p.indexVector("min_index", v)
	} else {
		opts.MinIndex = p.uint("min_index")
	}
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

// indexVector parses a per-shard index vector, "shard:index" pairs joined
// by commas ("0:12,3:40"), each shard at most once and below
// server.MaxShards.
func (p *params) indexVector(name, v string) map[int]uint64 {
	out := map[int]uint64{}
	for _, pair := range strings.Split(v, ",") {
		shardText, indexText, _ := strings.Cut(pair, ":")
		shard, shardErr := strconv.Atoi(shardText)
		index, indexErr := parseInteger(indexText)
		_, twice := out[shard]
		if shardErr != nil || shard < 0 || shard >= server.MaxShards || indexErr != nil || twice {
			p.fail(api.Errorf(api.CodeInvalidArgument,
				"parameter %s=%q is neither an index nor shard:index pairs joined by commas (shards 0 to %d, each once; indexes 0 to %d)",
				name, v, server.MaxShards-1, uint64(api.MaxInteger)))
			return nil
		}
		out[shard] = index
	}
	return out
}
