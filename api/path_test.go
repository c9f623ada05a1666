package api

import (
	"strings"
	"testing"
)

func TestValidatePath(t *testing.T) {
	tests := []struct {
		name string
		path string
		ok   bool
	}{
		{"root", "/", true},
		{"simple", "/a", true},
		{"nested", "/a/b/c", true},
		{"unicode", "/locks/é", true},
		{"empty", "", false},
		{"relative", "a/b", false},
		{"trailing slash", "/a/", false},
		{"empty segment", "/a//b", false},
		{"dot", "/a/./b", false},
		{"dotdot", "/a/../b", false},
		{"control", "/a\x00b", false},
		{"del", "/a\x7fb", false},
		{"c1 control", "/a\u0085b", false},
		{"bad utf8", "/a\xffb", false},
		{"max length", "/" + strings.Repeat("a", MaxPathLen-1), true},
		{"too long", "/" + strings.Repeat("a", MaxPathLen), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePath(tt.path)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidatePath(%q) = %v, want ok=%v", tt.path, err, tt.ok)
			}
			if err != nil && CodeOf(err) != CodeInvalidArgument {
				t.Fatalf("error code %s, want invalid_argument", CodeOf(err))
			}
		})
	}
}

func TestParentBaseJoin(t *testing.T) {
	tests := []struct{ path, parent, base string }{
		{"/", "/", ""},
		{"/a", "/", "a"},
		{"/a/b", "/a", "b"},
	}
	for _, tt := range tests {
		if got := Parent(tt.path); got != tt.parent {
			t.Errorf("Parent(%q) = %q, want %q", tt.path, got, tt.parent)
		}
		if got := Base(tt.path); got != tt.base {
			t.Errorf("Base(%q) = %q, want %q", tt.path, got, tt.base)
		}
		if tt.path != "/" {
			if got := Join(tt.parent, tt.base); got != tt.path {
				t.Errorf("Join(%q, %q) = %q", tt.parent, tt.base, got)
			}
		}
	}
}

func TestIDRoundTrip(t *testing.T) {
	for _, id := range []uint64{1, 0x3f2a9c01d4e5b6a7, ^uint64(0)} {
		got, err := ParseID(FormatID(id))
		if err != nil || got != id {
			t.Fatalf("ParseID(FormatID(%#x)) = %#x, %v", id, got, err)
		}
	}
	for _, bad := range []string{"", "0x", "0x0", "zz", "0x12345678901234567", "-1"} {
		if _, err := ParseID(bad); CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ParseID(%q): %v, want invalid_argument", bad, err)
		}
	}
}

func TestCodeStatus(t *testing.T) {
	want := map[Code]int{
		CodeInvalidArgument: 400, CodeNotFound: 404, CodeMethodNotAllowed: 405, CodePreconditionFailed: 409, CodeLockNotHeld: 409,
		CodeSessionExpired: 410, CodeTooLarge: 413, CodeOverloaded: 429, CodeUnavailable: 503, CodeInternal: 500, CodeUnauthenticated: 401, CodePermissionDenied: 403,
	}
	for code, status := range want {
		if got := code.Status(); got != status {
			t.Errorf("%s.Status() = %d, want %d", code, got, status)
		}
	}
}

// BenchmarkValidatePath validates a benchmark's key: no allocation.
func BenchmarkValidatePath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := ValidatePath("/bench/set1764672000000000000/k00001234"); err != nil {
			b.Fatal(err)
		}
	}
}
