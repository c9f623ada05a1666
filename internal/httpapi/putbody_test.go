package httpapi

import (
	"testing"
)

// TestSimpleValue: the usual PUT bodies are read by hand, anything else
// is left to decodeStrict.
func TestSimpleValue(t *testing.T) {
	tests := []struct {
		body  string
		value string
		ok    bool
	}{
		{`{"value":"abc"}`, "abc", true},
		{" \r\n\t{ \"value\" :\t\"a b\" }\n", "a b", true},
		{`{"value":""}`, "", true},
		{`{"value":"héllo ✓"}`, "héllo ✓", true},
		{`{"value":"a\"b"}`, "", false},       // an escape
		{`{"value":"a\nb"}`, "", false},       // an escape
		{"{\"value\":\"a\x01b\"}", "", false}, // a control character
		{"{\"value\":\"\xff\"}", "", false},   // not UTF-8
		{`{"value":"abc"`, "", false},
		{`{"value":"abc"}x`, "", false},
		{`{"value":"abc"}{}`, "", false},
		{`{"value":"abc","value":"d"}`, "", false},
		{`{"Value":"abc"}`, "", false},
		{`{"value":null}`, "", false},
		{`{"value":1}`, "", false},
		{`{"valu":"abc"}`, "", false},
		{`{"value""abc"}`, "", false},
		{`{}`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		value, ok := simpleValue([]byte(tt.body))
		if value != tt.value || ok != tt.ok {
			t.Errorf("simpleValue(%q) = %q, %v; want %q, %v", tt.body, value, ok, tt.value, tt.ok)
		}
	}
}

// FuzzSimpleValue: whatever body simpleValue reads, decodeStrict reads to
// the same value, so the hand-made path changes no answer.
func FuzzSimpleValue(f *testing.F) {
	for _, body := range []string{`{"value":"abc"}`, ` { "value" : "x y" } `, `{"value":"a\u0041"}`, `{"value":"é"}`, `{"value":""}`} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		value, ok := simpleValue([]byte(body))
		if !ok {
			return
		}
		var strict putBody
		if err := decodeStrict([]byte(body), &strict); err != nil || strict.Value == nil || *strict.Value != value {
			t.Fatalf("simpleValue(%q) = %q, but decodeStrict gives %v, %v", body, value, strict.Value, err)
		}
	})
}
