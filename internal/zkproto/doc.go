// Package zkproto is the wire codec of ZooKeeper's client protocol: the jute
// primitives (int, long, boolean, buffer, ustring, vector), the length-prefixed
// framing, the client records (connect handshake, request and reply headers,
// Stat, ACL, and the request and response bodies of the opcodes latch serves)
// and the protocol's constants (opcodes, special xids, error codes, event
// types, keeper states, create modes).
//
// It owns bytes only: no listener, no sessions, no mapping onto latch's state
// (package zkserver is the listener). It imports the standard library only.
//
// Invariants:
//   - Decoding never panics, whatever the input; every length (buffer,
//     ustring, vector count, frame) is checked against the bytes that remain
//     before anything is allocated, so a hostile length cannot make it
//     allocate more than the packet holds.
//   - Every decoding error is a *DecodeError naming the field and the byte
//     offset within the record where decoding stopped.
//   - Decode of a whole record refuses trailing bytes, except where the
//     protocol defines an optional trailing field (the connect handshake's
//     readOnly flag), which is decoded and reported as present or absent so
//     that the reply can answer in the form asked.
//   - A frame longer than MaxPacket or with a negative length is refused
//     before its body is read.
package zkproto
