package zkserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
)

// The ZooKeeper session password.
//
// ZooKeeper gives each session a random 16-byte password that a client
// must present with the session id to resume the session on another
// server. In latch the session id itself is the session's bearer secret
// (64 random bits, never shown to other clients: reads show a session
// handle instead), so the password adds no secret: it is a digest of the
// id, which every member computes alike with nothing recorded in the log
// and no cluster key to distribute or rotate. It is still checked, so a
// client that presents a wrong password is refused as ZooKeeper refuses
// it (the session is reported expired).

// passwordDomain separates this digest from every other hash of a session
// id (api.SessionHandle uses another domain).
const passwordDomain = "latch zookeeper session password v1\x00"

// passwordLen is the length of ZooKeeper's session password.
const passwordLen = 16

// sessionPassword returns the password of session id.
func sessionPassword(id uint64) []byte {
	var b [len(passwordDomain) + 8]byte
	copy(b[:], passwordDomain)
	binary.BigEndian.PutUint64(b[len(passwordDomain):], id)
	sum := sha256.Sum256(b[:])
	return sum[:passwordLen]
}

// passwordMatches reports whether passwd is session id's password, in time
// that does not depend on where they differ.
func passwordMatches(id uint64, passwd []byte) bool {
	return subtle.ConstantTimeCompare(sessionPassword(id), passwd) == 1
}
