package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// serve runs one request through Handler, with a notFound that answers 404
// "not found".
func serve(method, path string) *http.Response {
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found", http.StatusNotFound)
	})
	rec := httptest.NewRecorder()
	Handler(notFound).ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestServesEmbeddedAssets(t *testing.T) {
	tests := []struct {
		name, path, contentType, contains string
	}{
		{"page", "/ui", "text/html; charset=utf-8", `<script src="/ui/app.js"`},
		{"page with slash", "/ui/", "text/html; charset=utf-8", `<link rel="stylesheet" href="/ui/style.css">`},
		{"page by name", "/ui/index.html", "text/html; charset=utf-8", "<title>latch dashboard</title>"},
		{"script", "/ui/app.js", "text/javascript; charset=utf-8", "/v1/cluster/health"},
		{"style", "/ui/style.css", "text/css; charset=utf-8", "font:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := serve(http.MethodGet, tt.path)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("GET %s: %d %q; want 200 %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.contentType)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Fatalf("GET %s: body lacks %q", tt.path, tt.contains)
			}
			csp := resp.Header.Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "style-src 'self'"} {
				if !strings.Contains(csp, directive) {
					t.Fatalf("GET %s: Content-Security-Policy %q lacks %q", tt.path, csp, directive)
				}
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("GET %s: no X-Content-Type-Options: nosniff", tt.path)
			}
		})
	}
	head := serve(http.MethodHead, "/ui/app.js")
	if body, _ := io.ReadAll(head.Body); head.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD /ui/app.js: %d with %d bytes; want 200 and no body", head.StatusCode, len(body))
	}
}

func TestOtherPathsAreNotFound(t *testing.T) {
	for _, path := range []string{"/ui/missing.js", "/ui/assets/app.js", "/ui/../go.mod", "/ui/x/app.js",
		"/ui/app", "/uix", "/ui/.", "/ui/ui.go", "/ui/doc.go"} {
		if resp := serve(http.MethodGet, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d; want the caller's 404", path, resp.StatusCode)
		}
	}
}

// TestAssetsFetchNothingElsewhere: the page must work on an air-gapped
// host, so no asset names another origin (the SVG namespace is a name, not
// a fetch) or an inline script the policy would block.
func TestAssetsFetchNothingElsewhere(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(data), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s names another origin: %s", path, m)
			}
		}
		if strings.HasSuffix(path, ".html") && regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).Match(data) {
			t.Errorf("%s has an inline script, which the Content-Security-Policy blocks", path)
		}
		if strings.Contains(string(data), "@import") || strings.Contains(string(data), "@font-face") {
			t.Errorf("%s imports a stylesheet or a font", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
