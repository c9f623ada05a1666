package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/latch-io/latch/api"
)

// TestDecodeStrict: what decodeStrict accepts and refuses, with the field
// each refusal names.
func TestDecodeStrict(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // "" to accept, else a part of the message
	}{
		{"empty", "", ""},
		{"blank", " \n", ""},
		{"object", `{"session_id":"0x1","session_ids":["0x2"]}`, ""},
		{"escaped key", `{"session_\u0069d":"0x1"}`, ""},
		{"surrogate pair", `{"session_id":"\ud83d\ude00"}`, ""},
		{"escaped backslash before u", `{"session_id":"\\ud800"}`, ""},
		{"other case", `{"Session_ID":"0x1"}`, `unknown field "Session_ID"`},
		{"duplicate", `{"session_id":"0x1","session_id":"0x1"}`, "given twice"},
		{"null field", `{"session_id":null}`, "session_id is null"},
		{"null in array", `{"session_ids":[null]}`, "session_ids holds a null"},
		{"number in array", `{"session_ids":[1]}`, "session_ids must be a string"},
		{"top-level array", `[]`, "want a JSON object, not an array"},
		{"top-level null", `null`, "not null"},
		{"trailing", `{} []`, "data after the object"},
		{"unterminated", `{"session_id":"0x1"`, "bad JSON body"},
		{"invalid UTF-8 in key", "{\"\xc3\":1}", "UTF-8"},
		{"lone low", `{"session_id":"\udfff"}`, `\udfff`},
		{"high then high", `{"session_id":"\ud800\ud800"}`, `\ud800`},
		{"high at end", `{"session_id":"x\ud800"}`, `\ud800`},
		{"deep nesting", `{"session_ids":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, "nests deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v api.SessionRequest
			err := decodeStrict([]byte(tt.body), &v)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("%s: %v, want accepted", tt.body, err)
			case tt.want != "" && (api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("%s: %v, want invalid_argument mentioning %q", tt.body, err, tt.want)
			}
		})
	}
	var n struct {
		N uint64 `json:"n"`
	}
	for _, bad := range []string{"-1", "1.0", "1e2", "9007199254740992", "18446744073709551615", "18446744073709551616"} {
		if err := decodeStrict([]byte(`{"n":`+bad+`}`), &n); api.CodeOf(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "n="+bad) {
			t.Errorf("n=%s: %v, want invalid_argument naming it", bad, err)
		}
	}
	if err := decodeStrict([]byte(`{"n":9007199254740991}`), &n); err != nil || n.N != api.MaxInteger {
		t.Errorf("n=2^53-1: %v, %d", err, n.N)
	}
}

// FuzzDecodeStrict: decodeStrict never panics, refuses only with
// invalid_argument, and what it accepts encoding/json decodes alike, with
// no character replaced by U+FFFD that the body did not spell.
func FuzzDecodeStrict(f *testing.F) {
	f.Add(`{"value":"x"}`)
	f.Add(`{"value":"\ud800"}`)
	f.Add(`{"value":"\ud83d\ude00"}`)
	f.Add(`{"Value":"x","value":"y"}`)
	f.Add("{\"value\":\"\xff\"}")
	f.Fuzz(func(t *testing.T, body string) {
		var strict putBody
		err := decodeStrict([]byte(body), &strict)
		if err != nil {
			if api.CodeOf(err) != api.CodeInvalidArgument {
				t.Fatalf("%q: %v, want invalid_argument", body, err)
			}
			return
		}
		if strict.Value == nil {
			return
		}
		var loose putBody
		if err := json.Unmarshal([]byte(body), &loose); err != nil || loose.Value == nil || *loose.Value != *strict.Value {
			t.Fatalf("%q: accepted strictly as %q but encoding/json gives %v", body, *strict.Value, err)
		}
		if !utf8.ValidString(*strict.Value) {
			t.Fatalf("%q: accepted a value that is not UTF-8", body)
		}
		if strings.ContainsRune(*strict.Value, utf8.RuneError) && !strings.ContainsRune(body, utf8.RuneError) &&
			!strings.Contains(strings.ToLower(body), `\ufffd`) {
			t.Fatalf("%q: accepted, and decoding replaced something with U+FFFD", body)
		}
	})
}

// TestPlainObject: the bodies that take plainObject's one scan, and those
// left to the token walk.
func TestPlainObject(t *testing.T) {
	fields := jsonFields(reflect.TypeOf(plainTarget{}))
	tests := []struct {
		body  string
		plain bool
	}{
		{`{}`, true},
		{" { } \n", true},
		{`{"name":"bench-lock-1","session_id":"0x1f","wait_ms":10000}`, true},
		{`{"ids":[1, 2,3],"on":true,"off":false,"n":0}`, true},
		{`{"names":[],"name":""}`, true},
		{`{"n":9007199254740991}`, true},
		{`{"name":1}`, true}, // the decoder refuses the type
		{`{"n":9007199254740992}`, false},
		{`{"n":12345678901234567}`, false},
		{`{"n":01}`, false},
		{`{"n":-1}`, false},
		{`{"n":1.5}`, false},
		{`{"n":1e2}`, false},
		{`{"n":null}`, false},
		{`{"name":"a\"b"}`, false},
		{`{"name":"\u0061"}`, false},
		{"{\"name\":\"a\tb\"}", false},
		{`{"nam\u0065":"a"}`, false},
		{`{"Name":"a"}`, false},
		{`{"other":"a"}`, false},
		{`{"name":"a","name":"b"}`, false},
		{`{"ids":[[1]]}`, false},
		{`{"ids":[1,]}`, false},
		{`{"ids":[1 2]}`, false},
		{`{"name":{"a":1}}`, false},
		{`{"name":"a",}`, false},
		{`{"name":"a"} {}`, false},
		{`{"name":"a"`, false},
		{`{"on":truex}`, false},
		{`{"on":tru}`, false},
		{`[]`, false},
		{`"name"`, false},
	}
	for _, tt := range tests {
		if got := plainObject([]byte(tt.body), fields); got != tt.plain {
			t.Errorf("plainObject(%s) = %v, want %v", tt.body, got, tt.plain)
		}
	}
}

// plainTarget has a field of every kind the API's bodies use.
type plainTarget struct {
	Name  string   `json:"name"`
	ID    string   `json:"session_id"`
	Wait  uint64   `json:"wait_ms"`
	N     uint64   `json:"n"`
	On    bool     `json:"on"`
	Off   bool     `json:"off"`
	IDs   []uint64 `json:"ids"`
	Names []string `json:"names"`
}

// FuzzPlainObjectDecodesAlike: decodeStrict, which decodes a plain body
// with encoding/json alone, gives every body the outcome of the token walk
// (decodeChecked): the same refusal message, or the same value, for each
// kind of body the API reads.
func FuzzPlainObjectDecodesAlike(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"name":"l","session_id":"0x1","wait_ms":10}`, `{"timeout_ms":60000}`,
		`{"session_ids":["0x1","0x2"]}`, `{"ids":[1,2],"on":true,"names":["a"]}`,
		`{"name":"a","name":"b"}`, `{"name":1}`, `{"ids":["x"]}`, `{"n":9007199254740992}`,
		`{"fencing_token":7,"session_id":"0x2","name":"x"}`, `{"session_id":null}`,
		`{"ops":["x",1],"request_seq":3}`, `{"reads":[]}`, `{"value":"v","ttl_ms":5}`, `{"learner":true,"name":"n4"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		data := []byte(body)
		if !utf8.Valid(data) || len(bytes.TrimSpace(data)) == 0 {
			return // decodeStrict answers these before either path
		}
		compare := func(fast, checked any) {
			errFast := decodeStrict(data, fast)
			errChecked := decodeChecked(data, checked, jsonFields(reflect.TypeOf(checked).Elem()))
			if fmt.Sprint(errFast) != fmt.Sprint(errChecked) {
				t.Fatalf("%s into %T: %v, the token walk says %v", body, fast, errFast, errChecked)
			}
			if errFast == nil && !reflect.DeepEqual(fast, checked) {
				t.Fatalf("%s into %T: %+v, the token walk gives %+v", body, fast, fast, checked)
			}
		}
		compare(&plainTarget{}, &plainTarget{})
		compare(&api.LockRequest{}, &api.LockRequest{})
		compare(&api.SessionRequest{}, &api.SessionRequest{})
		compare(&api.SessionCreateRequest{}, &api.SessionCreateRequest{})
		compare(&putBody{}, &putBody{})
		compare(&txnBody{}, &txnBody{})
		compare(&readManyBody{}, &readManyBody{})
		compare(&addMemberRequest{}, &addMemberRequest{})
		compare(&api.ReadOp{}, &api.ReadOp{})
	})
}

// BenchmarkDecodeStrict: a lock acquire's body, by the one scan and by
// the token walk.
func BenchmarkDecodeStrict(b *testing.B) {
	body := []byte(`{"name":"bench-lock-3","session_id":"0x5c0ffee15bad5eed","wait_ms":10000}`)
	fields := jsonFields(reflect.TypeOf(api.LockRequest{}))
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req api.LockRequest
			if err := decodeStrict(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("token-walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req api.LockRequest
			if err := decodeChecked(body, &req, fields); err != nil {
				b.Fatal(err)
			}
		}
	})
}
