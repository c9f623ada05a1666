package httpapi

import (
	"net/http"
	"strings"

	"github.com/latch-io/latch/api"
)

// routeMethods are the methods the API's routes use, in the order an Allow
// header lists them. A GET route also serves HEAD.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete}

// allowedMethods returns the methods that have a route for r's path. With
// literal, only routes naming the path exactly count, not those matching it
// through a wildcard (GET /v1/session/{id} matches /v1/session/create, but
// only POST /v1/session/create names it).
func (h *Handler) allowedMethods(r *http.Request, literal bool) []string {
	var allowed []string
	for _, m := range routeMethods {
		probe := new(http.Request)
		*probe = *r
		probe.Method = m
		_, pattern := h.mux.Handler(probe)
		if pattern == "" || pattern == "/" || literal && strings.Contains(pattern, "{") ||
			m == http.MethodHead && strings.HasSuffix(pattern, "/events") {
			continue
		}
		allowed = append(allowed, m)
	}
	return allowed
}

// methodNotAllowed answers 405 method_not_allowed with the Allow header.
func (h *Handler) methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed []string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	h.writeError(w, api.Errorf(api.CodeMethodNotAllowed, "%s %s: method not allowed; use %s",
		r.Method, r.URL.Path, strings.Join(allowed, " or ")))
}

// badPathID answers a request whose path segment should be an id but is
// not: 405 if the path names another method's route (GET
// /v1/session/create), else 400 naming the segment.
func (h *Handler) badPathID(w http.ResponseWriter, r *http.Request, err error) {
	if allowed := h.allowedMethods(r, true); len(allowed) > 0 {
		h.methodNotAllowed(w, r, allowed)
		return
	}
	h.writeError(w, err)
}
