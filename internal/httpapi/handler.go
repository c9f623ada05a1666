package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/server"
	"github.com/latch-io/latch/internal/ui"
)

// Handler serves the client API of one server.
type Handler struct {
	server *server.Server
	log    *slog.Logger
	mux    *http.ServeMux
	// maxBody bounds request bodies: a value of the configured maximum size,
	// JSON-escaped at worst, plus room for the other fields.
	maxBody int64
}

// New returns the HTTP handler of s's client API.
func New(s *server.Server, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{server: s, log: log, mux: http.NewServeMux(),
		maxBody: int64(6*s.Config().MaxValueSize + 4096)}
	h.routes()
	return h
}

// route is one endpoint of the mux: its pattern, the query parameters it
// takes and its handler. The mux runs every handler behind strictQuery, so
// no endpoint can forget docs/api.md's rule on parameters.
type route struct {
	pattern string
	// params are the query parameters the endpoint takes; any other, or
	// one given twice, is 400 invalid_argument before the handler runs.
	params []string
	// anyQuery: the endpoint is for generic tools (probes, scrapers,
	// browsers), which may add a query of their own; it takes any.
	anyQuery bool
	// noHead: a GET endpoint that HEAD, which the mux sends to every GET
	// route, must not reach (405 before anything else).
	noHead  bool
	handler http.Handler
}

// readParams are the query parameters of a read: consistency and min_index.
var readParams = []string{"consistency", "min_index"}

// routeTable is every endpoint the mux serves (the node routes under
// /v1/kv/ are ServeHTTP's own, their parameters checked per method).
func (h *Handler) routeTable() []route {
	hf := func(f http.HandlerFunc) http.Handler { return f }
	dashboard := ui.Handler(http.HandlerFunc(h.noSuchEndpoint))
	return []route{
		{pattern: "POST /v1/session/create", handler: hf(h.createSession)},
		{pattern: "POST /v1/session/heartbeat", handler: hf(h.heartbeat)},
		{pattern: "POST /v1/session/close", handler: hf(h.closeSession)},
		{pattern: "GET /v1/session/{id}", params: readParams, handler: hf(h.getSession)},
		// HEAD would open a stream without a body in place of the
		// session's real one.
		{pattern: "GET /v1/session/{id}/events", noHead: true, handler: hf(h.events)},
		{pattern: "POST /v1/watch", handler: hf(h.addWatch)},
		{pattern: "DELETE /v1/watch/{id}", params: []string{"session_id"}, handler: hf(h.cancelWatch)},
		{pattern: "POST /v1/lock/acquire", handler: hf(h.acquireLock)},
		{pattern: "POST /v1/lock/release", handler: hf(h.releaseLock)},
		{pattern: "GET /v1/lock/{name}", params: readParams, handler: hf(h.lockState)},
		{pattern: "POST /v1/election/join", handler: hf(h.joinElection)},
		{pattern: "POST /v1/election/resign", handler: hf(h.resignElection)},
		{pattern: "GET /v1/election/{role}", params: readParams, handler: hf(h.electionState)},
		{pattern: "POST /v1/txn", handler: hf(h.txn)},
		{pattern: "POST /v1/read", params: readParams, handler: hf(h.readMany)},
		{pattern: "GET /v1/status", handler: h.gated(hf(h.status))},
		{pattern: "GET /v1/cluster/members", params: readParams, handler: hf(h.members)},
		{pattern: "POST /v1/cluster/members", handler: hf(h.addMember)},
		{pattern: "DELETE /v1/cluster/members/{id}", handler: hf(h.removeMember)},
		{pattern: "POST /v1/cluster/members/{id}/promote", handler: hf(h.promoteMember)},
		{pattern: "POST /v1/cluster/leader", handler: hf(h.transferLeader)},
		{pattern: "GET /v1/locks", params: listParams, handler: hf(h.listLocks)},
		{pattern: "GET /v1/elections", params: listParams, handler: hf(h.listElections)},
		{pattern: "GET /v1/sessions", params: listParams, handler: hf(h.listSessions)},
		{pattern: "GET /v1/cluster/health", handler: h.gated(hf(h.clusterHealth))},
		{pattern: "GET /v1/snapshot", params: readParams, handler: hf(h.snapshot)},
		{pattern: "POST /v1/auth/login", handler: hf(h.login)},
		{pattern: "POST /v1/auth/logout", handler: hf(h.logout)},
		{pattern: "GET /v1/auth", handler: hf(h.authStatus)},
		{pattern: "POST /v1/auth", handler: hf(h.changeAuth)},
		// The dashboard's files hold no data (the page reads it through the
		// endpoints, each checked as usual): served to anyone, so that with
		// auth enabled the page can show its login form.
		{pattern: "GET /ui", anyQuery: true, handler: dashboard},
		{pattern: "GET /ui/{asset...}", anyQuery: true, handler: dashboard},
		{pattern: "GET /healthz", anyQuery: true, handler: hf(h.healthz)},
		{pattern: "GET /readyz", anyQuery: true, handler: hf(h.readyz)},
		{pattern: "GET /metrics", anyQuery: true, handler: h.gated(h.server.MetricsHandler())},
	}
}

func (h *Handler) routes() {
	for _, rt := range h.routeTable() {
		h.mux.Handle(rt.pattern, h.strictQuery(rt))
	}
	h.mux.HandleFunc("/", h.notFound)
}

// strictQuery runs rt's handler once the request's query holds only the
// parameters rt takes, each once, and nothing url.ParseQuery cannot read
// (docs/api.md, conventions): else 400 invalid_argument, before anything
// else is looked at (with auth enabled, before the caller is checked, as
// for a malformed body). HEAD on a noHead route is 405 first.
func (h *Handler) strictQuery(rt route) http.Handler {
	if rt.anyQuery {
		return rt.handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.noHead && r.Method == http.MethodHead {
			h.methodNotAllowed(w, r, []string{http.MethodGet})
			return
		}
		if r.URL.RawQuery != "" {
			if p := requestParams(r, rt.params...); p.err != nil {
				h.writeError(w, p.err)
				return
			}
		}
		if err := refuseBody(r); err != nil {
			h.writeError(w, err)
			return
		}
		rt.handler.ServeHTTP(w, r)
	})
}

// refuseBody refuses a body on a request whose method takes none (GET,
// HEAD, DELETE: every endpoint of those methods reads its input from the
// path and the query), rather than ignore what its sender meant. Other
// methods' bodies are their handlers' to read.
func refuseBody(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete:
	default:
		return nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var one [1]byte
	if n, _ := io.ReadFull(r.Body, one[:]); n == 0 {
		return nil // declared, but empty
	}
	return api.Errorf(api.CodeInvalidArgument, "%s %s takes no body: its input is the path and the query", r.Method, r.URL.Path)
}

// ServeHTTP routes node requests itself, because http.ServeMux would clean
// (and redirect) the very paths that docs/api.md says must be refused with 400.
// Other paths that are not clean (".", "..", "//", a trailing "/") are
// unknown endpoints rather than redirects.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = withCaller(r)
	defer h.instrument(&w, r)()
	switch p := r.URL.Path; {
	case p == "/v1/kv":
		h.writeError(w, api.Errorf(api.CodeInvalidArgument, "missing node path: nodes are at /v1/kv/{path}, the root node at /v1/kv/"))
	case strings.HasPrefix(p, kvPrefix):
		h.serveNode(w, r, "/"+strings.TrimPrefix(p, kvPrefix))
	case p != "/" && p != "/ui/" && path.Clean(p) != p:
		h.noSuchEndpoint(w, r)
	default:
		h.mux.ServeHTTP(w, r)
	}
}

// notFound answers a request no route takes: 405 if the path has routes for
// other methods, else 404.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	if allowed := h.allowedMethods(r, false); len(allowed) > 0 {
		h.methodNotAllowed(w, r, allowed)
		return
	}
	h.noSuchEndpoint(w, r)
}

func (h *Handler) noSuchEndpoint(w http.ResponseWriter, r *http.Request) {
	h.writeError(w, api.Errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
}

// jsonContentType is the Content-Type header value of every JSON reply,
// shared by all of them: net/http only reads it.
var jsonContentType = []string{"application/json"}

// writeJSON writes v with status 200 and the X-Latch-Index header, in one
// Write. The hot replies are encoded without reflection (encode.go), the
// others by encoding/json; the bytes are the same either way.
func (h *Handler) writeJSON(w http.ResponseWriter, index uint64, v any) {
	header := w.Header()
	header["Content-Type"] = jsonContentType
	header[api.HeaderIndex] = []string{strconv.FormatUint(index, 10)}
	if shards := h.server.Shards(); shards > 1 {
		header[api.HeaderShards] = []string{strconv.Itoa(shards)}
	}
	buf := replyBuffers.Get().(*[]byte)
	b, ok := appendReply((*buf)[:0], v)
	if !ok {
		data, err := json.Marshal(v)
		if err != nil {
			h.writeError(w, fmt.Errorf("encoding a reply: %w", err))
			replyBuffers.Put(buf)
			return
		}
		b = append(append(b, data...), '\n')
	}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		h.log.Debug("writing reply", "err", err)
	}
	if cap(b) <= maxPooledReply {
		*buf = b
		replyBuffers.Put(buf)
	}
}

// writeError writes err in docs/api.md's error envelope; errors without an API
// code are internal and logged.
func (h *Handler) writeError(w http.ResponseWriter, err error) {
	h.writeErrorWith(w, err, func(e api.Error) any { return api.ErrorBody{Error: e} })
}

// writeErrorWith is writeError with the reply's body chosen by body (the
// error envelope with fields of its own beside it).
func (h *Handler) writeErrorWith(w http.ResponseWriter, err error, body func(e api.Error) any) {
	var e *api.Error
	if !errors.As(err, &e) {
		h.log.Error("internal error serving request", "err", err)
		e = api.Errorf(api.CodeInternal, "internal error")
	}
	w.Header().Set("Content-Type", "application/json")
	if e.Code == api.CodeOverloaded {
		w.Header().Set("Retry-After", "1") // every 429: retry after a second, with backoff
	}
	w.WriteHeader(e.Code.Status())
	_ = json.NewEncoder(w).Encode(body(*e))
}

// decodeBody decodes a JSON body into v strictly (see decodeStrict): at most
// maxBody bytes, one object, exact field names. An empty body leaves v as it is.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return h.decodeBodyLimit(w, r, v, h.maxBody)
}

// noFields is the body of an endpoint that takes no fields.
type noFields struct{}

// decodeNoBody reads the body of an endpoint that takes nothing in it: an
// empty body or {}, as strictly as decodeBody reads any other.
func (h *Handler) decodeNoBody(w http.ResponseWriter, r *http.Request) error {
	return h.decodeBody(w, r, &noFields{})
}

// decodeBodyLimit is decodeBody with a body limit of its own.
func (h *Handler) decodeBodyLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	data, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

// readBody reads the whole request body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	var late *bodyTimeoutError
	switch {
	case errors.As(err, &tooBig):
		return nil, api.Errorf(api.CodeTooLarge, "request body over %d bytes", tooBig.Limit)
	case errors.As(err, &late):
		w.Header().Set("Connection", "close")
		return nil, api.Errorf(api.CodeInvalidArgument, "request body not received within %v", late.limit)
	case err != nil:
		return nil, api.Errorf(api.CodeInvalidArgument, "reading the request body: %v", err)
	}
	return data, nil
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	st := h.server.Status()
	h.writeJSONIn(w, metaShard, st.AppliedIndex, st)
}

func (h *Handler) members(w http.ResponseWriter, r *http.Request) {
	opts, err := readOnlyOptions(r)
	if err != nil {
		h.writeError(w, err)
		return
	}
	m, err := h.server.ReadMembers(r.Context(), opts)
	h.replyIn(w, metaShard, m, m.Index, err)
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	h.writeJSONIn(w, metaShard, h.server.AppliedIndex(), map[string]bool{"ok": true})
}

// readyz answers 503 until the server is ready (server.Ready); on a member
// that stopped on a fatal error it says so, in the words of the 503 every
// read gets there (docs/api.md, "Fatal stop").
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.server.Ready() {
		if err := h.server.Err(); err != nil && !errors.Is(err, server.ErrRemoved) {
			h.writeError(w, api.Errorf(api.CodeUnavailable, "this member stopped on a fatal error and serves nothing: %v", err))
			return
		}
		h.writeError(w, api.Errorf(api.CodeUnavailable, "no leader known or log not applied up to the commit index"))
		return
	}
	h.writeJSONIn(w, metaShard, h.server.AppliedIndex(), map[string]bool{"ready": true})
}

// reply writes v, whose applied index is index, or err if it is not nil.
func (h *Handler) reply(w http.ResponseWriter, v any, index uint64, err error) {
	if err != nil {
		h.writeError(w, err)
		return
	}
	h.writeJSON(w, index, v)
}

// decodeWithSession decodes a JSON body of type T and parses the session id
// that sessionOf picks from it.
func decodeWithSession[T any](h *Handler, w http.ResponseWriter, r *http.Request, sessionOf func(*T) string) (T, uint64, error) {
	var req T
	if err := h.decodeBody(w, r, &req); err != nil {
		return req, 0, err
	}
	session, err := parseID("session_id", sessionOf(&req))
	return req, session, err
}

// readOnlyOptions reads the query of a read endpoint that takes only
// consistency and min_index.
func readOnlyOptions(r *http.Request) (server.ReadOptions, error) {
	p := requestParams(r, readParams...)
	opts := p.readOptions()
	return opts, p.err
}

// nameShard says, in a cluster of several shards, that the reply's index is
// of shard's log (api.HeaderShard); the handler calls it before replying.
// Every reply whose index is of one shard names it, so that a client can
// place the index among its per-shard positions (docs/api.md, "Sharded
// clusters"); a reply spanning shards names none.
func (h *Handler) nameShard(w http.ResponseWriter, shard int) {
	if h.server.Shards() > 1 {
		w.Header().Set(api.HeaderShard, strconv.Itoa(shard))
	}
}

// metaShard is the shard of the replies about sessions, membership, auth
// and status: their index is of the meta group's log.
const metaShard = server.MetaShard

// replyIn is reply for a reply whose index is of shard's log: a success
// names the shard (nameShard); an error carries no index, so no shard.
func (h *Handler) replyIn(w http.ResponseWriter, shard int, v any, index uint64, err error) {
	if err == nil {
		h.nameShard(w, shard)
	}
	h.reply(w, v, index, err)
}

// writeJSONIn is writeJSON for a reply whose index is of shard's log.
func (h *Handler) writeJSONIn(w http.ResponseWriter, shard int, index uint64, v any) {
	h.nameShard(w, shard)
	h.writeJSON(w, index, v)
}
