package client

import (
	"go/build"
	"strings"
	"testing"
)

// TestImportsStayPublic: the public client (and its test fake) import only
// the standard library and api, never anything under internal/.
func TestImportsStayPublic(t *testing.T) {
	for _, dir := range []string{".", "clienttest"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imported := range pkg.Imports {
			if strings.Contains(imported, "/internal/") || (strings.Contains(imported, ".") && !strings.HasPrefix(imported, "github.com/latch-io/latch/api")) {
				t.Errorf("%s imports %s: only the standard library and api are allowed", pkg.ImportPath, imported)
			}
		}
	}
}
