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

func (h *Handler) routes() {
	h.mux.HandleFunc("POST /v1/session/create", h.createSession)
	h.mux.HandleFunc("POST /v1/session/heartbeat", h.heartbeat)
	h.mux.HandleFunc("POST /v1/session/close", h.closeSession)
	h.mux.HandleFunc("GET /v1/session/{id}", h.getSession)
	h.mux.HandleFunc("GET /v1/session/{id}/events", h.events)
	h.mux.HandleFunc("POST /v1/watch", h.addWatch)
	h.mux.HandleFunc("DELETE /v1/watch/{id}", h.cancelWatch)
	h.mux.HandleFunc("POST /v1/lock/acquire", h.acquireLock)
	h.mux.HandleFunc("POST /v1/lock/release", h.releaseLock)
	h.mux.HandleFunc("GET /v1/lock/{name}", h.lockState)
	h.mux.HandleFunc("POST /v1/election/join", h.joinElection)
	h.mux.HandleFunc("POST /v1/election/resign", h.resignElection)
	h.mux.HandleFunc("GET /v1/election/{role}", h.electionState)
	h.mux.HandleFunc("POST /v1/txn", h.txn)
	h.mux.HandleFunc("POST /v1/read", h.readMany)
	h.mux.Handle("GET /v1/status", h.gated(http.HandlerFunc(h.status)))
	h.mux.HandleFunc("GET /v1/cluster/members", h.members)
	h.mux.HandleFunc("POST /v1/cluster/members", h.addMember)
	h.mux.HandleFunc("DELETE /v1/cluster/members/{id}", h.removeMember)
	h.mux.HandleFunc("POST /v1/cluster/members/{id}/promote", h.promoteMember)
	h.mux.HandleFunc("POST /v1/cluster/leader", h.transferLeader)
	h.mux.HandleFunc("GET /v1/locks", h.listLocks)
	h.mux.HandleFunc("GET /v1/elections", h.listElections)
	h.mux.HandleFunc("GET /v1/sessions", h.listSessions)
	h.mux.Handle("GET /v1/cluster/health", h.gated(http.HandlerFunc(h.clusterHealth)))
	// The dashboard's files hold no data (the page reads it through the
	// endpoints, each checked as usual): served to anyone, so that with
	// auth enabled the page can show its login form.
	h.mux.Handle("GET /ui", ui.Handler(http.HandlerFunc(h.noSuchEndpoint)))
	h.mux.Handle("GET /ui/{asset...}", ui.Handler(http.HandlerFunc(h.noSuchEndpoint)))
	h.mux.HandleFunc("GET /v1/snapshot", h.snapshot)
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	h.mux.Handle("GET /metrics", h.gated(h.server.MetricsHandler()))
	h.authRoutes()
	h.mux.HandleFunc("/", h.notFound)
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

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.server.Ready() {
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
	p := newParams(r.URL.Query(), "consistency", "min_index")
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
