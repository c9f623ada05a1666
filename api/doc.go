// Package api holds latch's client contract in Go: the JSON request and reply
// types of docs/api.md, the error codes and their HTTP statuses, and the path rules.
//
// It imports only the standard library so that every other package, the public
// client included, can share these definitions without pulling in the server.
package api
