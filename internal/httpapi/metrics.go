package httpapi

import (
	"net/http"
	"strings"
	"time"
)

// Request metrics: every request the Handler serves is counted by method,
// route and status code, and timed, by the server's metrics (latch_http_*).
// The route is the pattern that matched (bounded, whatever the paths
// clients send), never the raw path.

// kvRoute is the route of every node request (ServeHTTP routes them
// itself, outside the mux).
const kvRoute = "/v1/kv/{path...}"

// unmatchedRoute is the route of requests no route pattern matched.
const unmatchedRoute = "unmatched"

// instrument starts measuring r: it replaces *w with a writer that records
// the status code and returns the function that records the request once
// it was served. ServeHTTP defers it.
func (h *Handler) instrument(w *http.ResponseWriter, r *http.Request) func() {
	rec := &statusRecorder{ResponseWriter: *w}
	*w = rec
	start := time.Now()
	return func() {
		h.server.ObserveRequest(methodLabel(r.Method), routeOf(r), rec.code(), time.Since(start), rec.streamed())
	}
}

// routeOf returns the route of r once served: the mux's pattern without
// its method (the method is a label of its own), the node route, or
// "unmatched".
func routeOf(r *http.Request) string {
	if r.Pattern == "" {
		if strings.HasPrefix(r.URL.Path, kvPrefix) || r.URL.Path == "/v1/kv" {
			return kvRoute
		}
		return unmatchedRoute
	}
	route := r.Pattern
	if _, path, found := strings.Cut(route, " "); found {
		route = path
	}
	if route == "/" { // the catch-all of unknown endpoints
		return unmatchedRoute
	}
	return route
}

// methodLabel bounds the method label: a client may send any token as a
// method.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions:
		return method
	}
	return "other"
}

// statusRecorder is a ResponseWriter that remembers the status code it
// sent. It keeps the writer's Flush (event streams need it) and unwraps for
// http.ResponseController.
//
// It hides the net/http writer's unexported hook that http.MaxBytesReader
// calls when a body goes over its limit, by which the server closes the
// connection instead of reading the rest of the body. So a 413 closes the
// connection itself ("Connection: close" before the header is written,
// which the server honours the same way): the rest of an oversized body is
// not read before the reply.
type statusRecorder struct {
	http.ResponseWriter
	status int // 0 until the header is written
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
		if code == http.StatusRequestEntityTooLarge {
			s.Header().Set("Connection", "close")
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush sends buffered data to the client, if the underlying writer can.
func (s *statusRecorder) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// code returns the status sent: 200 if the handler wrote nothing (net/http
// then sends 200 itself).
func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// streamed reports whether the reply was an event stream.
func (s *statusRecorder) streamed() bool {
	return strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream")
}
