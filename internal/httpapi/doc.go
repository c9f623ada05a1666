// Package httpapi serves docs/api.md over HTTP/1.1 and JSON: it decodes and
// validates requests, calls package server, and encodes replies and errors.
// It holds no consensus logic and no state of its own beyond open streams.
//
// Every reply to a request that reached the state machine carries the
// X-Latch-Index header. Bad input (unknown parameters, malformed values,
// oversized bodies) is refused with docs/api.md's error codes before anything is
// proposed, so it changes nothing.
package httpapi
