package httpapi

import (
	"bytes"

	"github.com/latch-io/latch/api"
)

// plainObject reports whether data, valid UTF-8, is a body that every rule
// of decodeStrict accepts on its face, so that encoding/json alone can
// decode it: one JSON object, JSON whitespace anywhere between tokens,
// whose keys are among fields (exact case), each at most once, with no
// escape in any key or string, and whose values are strings, integers in
// [0, api.MaxInteger] as JSON spells them, true, false, or arrays of those
// (not nested), and nothing after it. Whether each value's type suits its
// field is left to the decoder. false means only that the body needs the
// token walk, which refuses it or accepts it with its message.
func plainObject(data []byte, fields []string) bool {
	if len(fields) > 64 {
		return false
	}
	rest, ok := expect(data, '{')
	if !ok {
		return false
	}
	if rest = skipSpace(rest); len(rest) > 0 && rest[0] == '}' {
		return len(skipSpace(rest[1:])) == 0
	}
	var given uint64 // bit i: fields[i] was given
	for {
		key, after, ok := plainString(rest)
		if !ok {
			return false
		}
		i := fieldIndex(fields, key)
		if i < 0 || given&(1<<i) != 0 {
			return false
		}
		given |= 1 << i
		if rest, ok = expect(after, ':'); !ok {
			return false
		}
		if rest, ok = plainValue(rest, true); !ok {
			return false
		}
		if rest = skipSpace(rest); len(rest) == 0 {
			return false
		}
		switch rest[0] {
		case ',':
			rest = rest[1:]
		case '}':
			return len(skipSpace(rest[1:])) == 0
		default:
			return false
		}
	}
}

// fieldIndex returns the index of key in fields, or -1.
func fieldIndex(fields []string, key []byte) int {
	for i, f := range fields {
		if string(key) == f {
			return i
		}
	}
	return -1
}

// plainValue reads one value that plainObject accepts (an array only if
// arrays is set) and returns what follows it.
func plainValue(data []byte, arrays bool) ([]byte, bool) {
	data = skipSpace(data)
	if len(data) == 0 {
		return nil, false
	}
	switch c := data[0]; {
	case c == '"':
		_, rest, ok := plainString(data)
		return rest, ok
	case c >= '0' && c <= '9':
		return plainInteger(data)
	case c == 't':
		return bytes.CutPrefix(data, []byte("true"))
	case c == 'f':
		return bytes.CutPrefix(data, []byte("false"))
	case c == '[' && arrays:
		return plainArray(data[1:])
	}
	return nil, false
}

// plainArray reads the rest of an array of plain values, after its '['.
func plainArray(data []byte) ([]byte, bool) {
	if rest := skipSpace(data); len(rest) > 0 && rest[0] == ']' {
		return rest[1:], true
	}
	for {
		rest, ok := plainValue(data, false)
		if !ok {
			return nil, false
		}
		if rest = skipSpace(rest); len(rest) == 0 {
			return nil, false
		}
		switch rest[0] {
		case ',':
			data = rest[1:]
		case ']':
			return rest[1:], true
		default:
			return nil, false
		}
	}
}

// plainString reads a string, after JSON whitespace, that has no escape and
// no control character (so its JSON means its bytes); it returns its
// content and what follows its closing quote.
func plainString(data []byte) (content, rest []byte, ok bool) {
	data = skipSpace(data)
	if len(data) == 0 || data[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return data[1:i], data[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// maxIntegerDigits is the number of digits of api.MaxInteger.
const maxIntegerDigits = 16

// plainInteger reads an integer in [0, api.MaxInteger] spelled as JSON
// spells one (no sign, no leading zero) and returns what follows it; a
// fraction or exponent after it is left for the caller to refuse.
func plainInteger(data []byte) ([]byte, bool) {
	end := 0
	var n uint64
	for end < len(data) && data[end] >= '0' && data[end] <= '9' {
		if end == maxIntegerDigits {
			return nil, false
		}
		n = n*10 + uint64(data[end]-'0')
		end++
	}
	if end > 1 && data[0] == '0' || n > api.MaxInteger {
		return nil, false
	}
	return data[end:], true
}
