package httpapi

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/latch-io/latch/api"
)

// The replies of the hot endpoints (a node read, a node write or delete, a
// lock acquire or release) are encoded here by hand, without reflection.
// Each appendX writes exactly the bytes that encoding/json's Encoder writes
// for the same value: fields in declaration order, omitempty honoured,
// strings with the same escapes (HTML-safe, invalid UTF-8 as \ufffd,
// U+2028 and U+2029 escaped), and the final newline. encode_test.go checks
// it against encoding/json on random values.

// appendReply appends the JSON of v and reports true if v is of a type
// encoded here; otherwise it returns dst unchanged and false.
func appendReply(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case api.Node:
		return appendNode(dst, &v), true
	case *api.Node:
		return appendNode(dst, v), true
	case api.Written:
		return appendWritten(dst, &v), true
	case api.Deleted:
		return appendOutcome(dst, `{"deleted":`, v.Deleted, v.Index, 0), true
	case api.Lock:
		return appendLock(dst, &v), true
	case api.Released:
		return appendOutcome(dst, `{"released":`, v.Released, v.Index, v.Shard), true
	}
	return dst, false
}

func appendNode(b []byte, n *api.Node) []byte {
	b = append(b, `{"path":`...)
	b = appendString(b, n.Path)
	b = append(b, `,"value":`...)
	b = appendString(b, n.Value)
	b = appendUintField(b, `,"version":`, n.Version)
	b = appendUintField(b, `,"created_index":`, n.CreatedIndex)
	b = appendUintField(b, `,"modified_index":`, n.ModifiedIndex)
	b = appendBoolField(b, `,"ephemeral":`, n.Ephemeral)
	b = append(b, `,"owner_handle":`...)
	b = appendString(b, n.OwnerHandle)
	b = append(b, `,"children_count":`...)
	b = strconv.AppendInt(b, int64(n.ChildrenCount), 10)
	b = appendUintField(b, `,"index":`, n.Index)
	if n.ChildrenIndex != 0 {
		b = appendUintField(b, `,"children_index":`, n.ChildrenIndex)
	}
	if n.CreatedAtMs != 0 {
		b = appendUintField(b, `,"created_at_ms":`, n.CreatedAtMs)
	}
	if n.ModifiedAtMs != 0 {
		b = appendUintField(b, `,"modified_at_ms":`, n.ModifiedAtMs)
	}
	if n.ChildrenVersion != 0 {
		b = appendUintField(b, `,"cversion":`, n.ChildrenVersion)
	}
	return append(b, "}\n"...)
}

func appendWritten(b []byte, w *api.Written) []byte {
	b = append(b, `{"path":`...)
	b = appendString(b, w.Path)
	b = appendUintField(b, `,"version":`, w.Version)
	b = appendUintField(b, `,"created_index":`, w.CreatedIndex)
	b = appendUintField(b, `,"modified_index":`, w.ModifiedIndex)
	b = appendUintField(b, `,"index":`, w.Index)
	return append(b, "}\n"...)
}

// appendOutcome appends the reply of a delete or a release: a flag, an
// index and the index's shard (left out while 0, as a release's omitempty
// field; a delete has none).
func appendOutcome(b []byte, flag string, done bool, index uint64, shard int) []byte {
	b = appendBoolField(b, flag, done)
	b = appendUintField(b, `,"index":`, index)
	b = appendShardField(b, shard)
	return append(b, "}\n"...)
}

// appendShardField appends a "shard" field unless shard is 0 (omitempty).
func appendShardField(b []byte, shard int) []byte {
	if shard == 0 {
		return b
	}
	b = append(b, `,"shard":`...)
	return strconv.AppendInt(b, int64(shard), 10)
}

func appendLock(b []byte, l *api.Lock) []byte {
	b = appendBoolField(b, `{"held":`, l.Held)
	b = append(b, `,"session_handle":`...)
	b = appendString(b, l.SessionHandle)
	if l.FencingToken != 0 {
		b = appendUintField(b, `,"fencing_token":`, l.FencingToken)
	}
	if l.Path != "" {
		b = append(b, `,"path":`...)
		b = appendString(b, l.Path)
	}
	if l.Position != 0 {
		b = append(b, `,"position":`...)
		b = strconv.AppendInt(b, int64(l.Position), 10)
	}
	b = appendUintField(b, `,"index":`, l.Index)
	b = appendShardField(b, l.Shard)
	return append(b, "}\n"...)
}

func appendUintField(b []byte, name string, v uint64) []byte {
	return strconv.AppendUint(append(b, name...), v, 10)
}

func appendBoolField(b []byte, name string, v bool) []byte {
	return strconv.AppendBool(append(b, name...), v)
}

// hexDigits are the digits of a \u00XX escape, lower case as encoding/json
// writes them.
const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json escapes
// it with HTML escaping on (its default).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is yet to be copied
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII(c) {
				i++
				continue
			}
			b = appendEscapedASCII(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		var escape string
		switch {
		case r == utf8.RuneError && size == 1:
			escape = `\ufffd`
		case r == '\u2028':
			escape = `\u2028`
		case r == '\u2029':
			escape = `\u2029`
		default:
			i += size
			continue
		}
		b = append(append(b, s[start:i]...), escape...)
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plainASCII reports whether the ASCII byte c is written as it is.
func plainASCII(c byte) bool { return plainASCIISet[c] }

// plainASCIISet holds the ASCII bytes written as they are: printable, and
// neither a quote, a backslash nor an HTML special character.
var plainASCIISet = func() (set [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		set[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return set
}()

// appendEscapedASCII appends the escape of an ASCII byte that plainASCII
// refuses.
func appendEscapedASCII(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}

// replyBuffers recycles the buffers replies are encoded into. Buffers that
// grew past maxPooledReply (a large value) are left to the collector.
var replyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledReply = 64 << 10
