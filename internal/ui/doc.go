// Package ui owns latch's dashboard: the HTML, CSS and JavaScript under
// assets/, embedded in the binary (go:embed), and the http.Handler that
// serves them at /ui on the client port (mounted by package httpapi).
//
// The page has no build step and fetches nothing from outside the member
// that served it: it polls that member's own JSON endpoints (GET
// /v1/cluster/health, /v1/locks, /v1/elections, /v1/sessions, /v1/kv/...)
// and parses its /metrics text. With auth enabled the page shows a login
// form and nothing else until a user signs in (POST /v1/auth/login); the
// token is kept in the tab's sessionStorage and sent as a bearer token,
// and a 401 locks the page again and clears it. The files themselves hold
// no data and are served without credentials. Every reply carries a
// Content-Security-Policy
// that allows scripts, styles and connections to the same origin only, so
// the page works on an air-gapped host and cannot be made to load anything
// else. The handler serves only the embedded files, read-only; anything
// else under /ui is a 404.
package ui
