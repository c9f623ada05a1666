package ui

import (
	"embed"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the dashboard is mounted; the page refers to its files
// under it.
const Prefix = "/ui"

// contentSecurityPolicy lets the page load and fetch from its own origin
// only: no CDN, no external font, no inline script.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// contentTypes are the types of the embedded files, by extension.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler serves the dashboard: /ui and /ui/ give index.html, /ui/NAME the
// embedded file NAME. notFound answers any other path (so the caller keeps
// its own error format).
func Handler(notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := assetName(r.URL.Path)
		if !ok {
			notFound.ServeHTTP(w, r)
			return
		}
		data, err := assets.ReadFile("assets/" + name)
		if err != nil {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentTypes[path.Ext(name)])
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(data)
		}
	})
}

// assetName maps a request path to an embedded file name: only files
// directly in assets/ with a known extension.
func assetName(p string) (string, bool) {
	switch p {
	case Prefix, Prefix + "/":
		return "index.html", true
	}
	name, found := strings.CutPrefix(p, Prefix+"/")
	if !found || name == "" || path.Base(name) != name || contentTypes[path.Ext(name)] == "" {
		return "", false
	}
	return name, true
}
