package api

import "testing"

// FuzzValidatePath: any string is either refused with invalid_argument or a
// path whose parent and base put back together give it again.
func FuzzValidatePath(f *testing.F) {
	for _, seed := range []string{"/", "/a", "/a/b", "", "a", "/a/", "//", "/a/../b", "/\x00", "/é/ü"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := ValidatePath(p)
		if err != nil {
			if CodeOf(err) != CodeInvalidArgument {
				t.Fatalf("ValidatePath(%q) error %v has code %s", p, err, CodeOf(err))
			}
			return
		}
		if p == "/" {
			return
		}
		if got := Join(Parent(p), Base(p)); got != p {
			t.Fatalf("Join(Parent(%q), Base(%q)) = %q", p, p, got)
		}
		if ValidatePath(Parent(p)) != nil {
			t.Fatalf("the parent %q of valid %q is not valid", Parent(p), p)
		}
	})
}
