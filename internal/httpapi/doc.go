// Package httpapi serves docs/api.md over HTTP/1.1 and JSON: it decodes and
// validates requests, calls package server, and encodes replies and errors.
// It holds no consensus logic and no state of its own beyond open streams.
//
// Every reply to a request that reached the state machine carries the
// X-Latch-Index header; in a cluster of several shards, every successful
// one whose index is of one shard's log also names that shard
// (X-Latch-Shard, set by replyIn and writeJSONIn through nameShard). Bad input (unknown parameters or fields, malformed
// or loosely spelled JSON, numbers over 2^53-1, oversized bodies, wrong
// methods) is refused with docs/api.md's error codes before anything is
// proposed, so it changes nothing. A lock acquire that gave up after
// wait_ms comes back from the server as a reply with Held false, and
// writeLockNotHeld (locks.go) answers it as docs/api.md's 409
// lock_not_held: the error envelope plus held, session_handle, position,
// path and index.
//
// listings.go serves the read-only listings (GET /v1/locks, /v1/elections,
// /v1/sessions: a page of at most 1000 entries with a truncated flag; GET
// /v1/cluster/health), and the Handler mounts the dashboard of package ui
// at /ui and /ui/..., its unknown paths answered as the API's 404.
//
// NewServer builds the one http.Server that latchd and the test clusters
// run: Limits bound the header read, the body read, each reply write and
// the idle keep-alive of every connection, and how many connections a
// listener holds; even the requests net/http refuses by itself are
// answered in the JSON error envelope.
package httpapi
