package api

import (
	"crypto/sha256"
	"encoding/binary"
)

// sessionHandleDomain separates the hash of a session handle from any other
// use of SHA-256 over a session id.
const sessionHandleDomain = "latch/session-handle/v1\x00"

// SessionHandle returns the public handle of session id: the first 8 bytes,
// big-endian, of SHA-256 over sessionHandleDomain and the id's 8 big-endian
// bytes.
//
// A session id is a bearer secret: whoever knows it can write, heartbeat,
// release, resign and close as the session. A handle names the session
// without that power, so every reply that describes another session (a
// node's owner, a lock's holder, an election's leader) carries the handle,
// never the id, and the replies to a session's owner about itself carry
// both, so that a client recognises itself in what it reads. The function is
// one-way: a handle does not reveal its id, and the server never accepts a
// handle in place of an id. Handles are computed when a reply is written;
// they are never stored or replicated.
func SessionHandle(id uint64) uint64 {
	var b [len(sessionHandleDomain) + 8]byte
	copy(b[:], sessionHandleDomain)
	binary.BigEndian.PutUint64(b[len(sessionHandleDomain):], id)
	sum := sha256.Sum256(b[:])
	return binary.BigEndian.Uint64(sum[:8])
}

// FormatSessionHandle renders the handle of session id like an id ("0x" and
// 16 hex digits).
func FormatSessionHandle(id uint64) string { return FormatID(SessionHandle(id)) }

// SessionHandleOf returns the formatted handle of the session whose id is
// rendered as s (by FormatID); the error is ParseID's.
func SessionHandleOf(s string) (string, error) {
	id, err := ParseID(s)
	if err != nil {
		return "", err
	}
	return FormatSessionHandle(id), nil
}
