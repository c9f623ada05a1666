package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/latch-io/latch/api"
)

// decodeStrict decodes data, a whole request body, into v, a pointer to a
// struct with json tags, more strictly than encoding/json does on its own:
// the body is one JSON object (or empty, which leaves v as it is), valid
// UTF-8 without lone surrogate escapes, whose keys are v's field names
// spelled exactly, each at most once, with no null values, and whose
// numbers are integers in [0, api.MaxInteger].
//
// A plain body (plainObject), which is what clients send, is checked by one
// scan; any other takes the token walk (decodeChecked), which gives every
// refusal its message. Both then decode alike (decodeInto), and both give a
// plain body the same outcome (FuzzPlainObjectDecodesAlike).
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if !utf8.Valid(data) {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: not valid UTF-8")
	}
	fields := jsonFields(reflect.TypeOf(v).Elem())
	if plainObject(data, fields) {
		return decodeInto(data, v)
	}
	return decodeChecked(data, v, fields)
}

// decodeChecked is decodeStrict's path for any body: the escapes, then a
// walk of every token (checkObject), then the decode. data is valid UTF-8.
func decodeChecked(data []byte, v any, fields []string) error {
	if err := checkEscapes(data); err != nil {
		return err
	}
	if err := checkObject(data, fields); err != nil {
		return err
	}
	return decodeInto(data, v)
}

// decodeInto is the decode both of decodeStrict's paths end with, once data
// has passed their checks.
func decodeInto(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// decodeError turns an encoding/json error into an invalid_argument that
// names the field.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s must be %s, not a JSON %s",
			typeErr.Field, kindName(typeErr.Type), typeErr.Value)
	}
	return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	case reflect.Uint64, reflect.Uint, reflect.Int, reflect.Int64:
		return "a number"
	}
	return "a " + t.Kind().String()
}

// fieldsByType caches jsonFields per body type: the set is fixed per type,
// so the reflection walk is done once, not on every request.
var fieldsByType sync.Map // reflect.Type -> []string

// jsonFields returns the JSON names of struct type t's exported fields.
// Callers must not modify the returned slice (it is shared).
func jsonFields(t reflect.Type) []string {
	if names, ok := fieldsByType.Load(t); ok {
		return names.([]string)
	}
	names := structJSONFields(t)
	fieldsByType.Store(t, names)
	return names
}

// structJSONFields walks t's fields for jsonFields.
func structJSONFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// checkEscapes refuses \u escapes that encode a lone UTF-16 surrogate, which
// encoding/json would silently turn into U+FFFD. data is valid UTF-8; outside
// strings a valid JSON text has no backslash, so every backslash starts an
// escape.
func checkEscapes(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 >= len(data) {
			continue
		}
		if data[i+1] != 'u' {
			i++ // a one-character escape such as \" or \\
			continue
		}
		r, ok := hex4(data[i+2:])
		switch {
		case !ok:
			return nil // malformed; the decoder reports it
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := lowSurrogate(data[i+6:]); !ok || low < 0xDC00 || low > 0xDFFF {
				return api.Errorf(api.CodeInvalidArgument, `bad JSON body: lone surrogate escape \u%04x`, r)
			}
			i += 11 // both escapes
		case r >= 0xDC00 && r <= 0xDFFF:
			return api.Errorf(api.CodeInvalidArgument, `bad JSON body: lone surrogate escape \u%04x`, r)
		default:
			i += 5
		}
	}
	return nil
}

// lowSurrogate reads the \uXXXX escape at the start of b.
func lowSurrogate(b []byte) (rune, bool) {
	if len(b) < 2 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	return hex4(b[2:])
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

// checkObject walks data's tokens: one object whose keys are among fields
// (exact case) and unique, with no null and no number that is not an
// integer in [0, api.MaxInteger] at any depth, and nothing after it.
func checkObject(data []byte, fields []string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	if tok != json.Delim('{') {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: want a JSON object, not %s", tokenName(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
		}
		key := tok.(string) // object keys are strings
		switch {
		case seen[key]:
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: field %q given twice", key)
		case !contains(fields, key) && len(fields) == 0:
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: unknown field %q (this endpoint takes no fields: send {} or no body)", key)
		case !contains(fields, key):
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: unknown field %q (fields are case-sensitive: %s)",
				key, strings.Join(fields, ", "))
		}
		seen[key] = true
		if err := checkValue(dec, key, 0); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: data after the object")
	}
	return nil
}

// maxDepth bounds the nesting inside a field's value (the API's bodies
// nest one array at most), so a deep body cannot exhaust the stack.
const maxDepth = 8

// checkValue reads one value of field, nested depth levels inside it (0:
// the field's own value).
func checkValue(dec *json.Decoder, field string, depth int) error {
	if depth > maxDepth {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s nests deeper than %d levels", field, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	switch t := tok.(type) {
	case nil:
		if depth == 0 {
			return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s is null; leave it out or give a value", field)
		}
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s holds a null", field)
	case json.Number:
		return checkNumber(field, t)
	case json.Delim:
		return checkNested(dec, field, t, depth)
	}
	return nil
}

// checkNested reads the rest of an object or array opened by delim.
func checkNested(dec *json.Decoder, field string, delim json.Delim, depth int) error {
	seen := map[string]bool{}
	for dec.More() {
		if delim == '{' {
			tok, err := dec.Token()
			if err != nil {
				return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
			}
			key := tok.(string)
			if seen[key] {
				return api.Errorf(api.CodeInvalidArgument, "bad JSON body: key %q given twice in %s", key, field)
			}
			seen[key] = true
		}
		if err := checkValue(dec, field, depth+1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	return nil
}

// checkNumber refuses a number that is not an integer in [0, api.MaxInteger]:
// encoding/json would wrap nothing, but 2^64-1 fits a uint64 and overflows
// every duration and sequence computed from it.
func checkNumber(field string, n json.Number) error {
	if _, err := parseInteger(string(n)); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "bad JSON body: %s=%s %v", field, n, err)
	}
	return nil
}

func tokenName(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}
