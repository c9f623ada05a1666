package api

import (
	"errors"
	"regexp"
)

// memberNamePattern is what a member name may look like: a name travels in
// latchd's --initial-cluster (where ',' and '=' separate entries), in URLs
// of the membership API and in logs, and its hash is the member's raft id.
var memberNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckMemberName says what is wrong with a member name, or nil. latchd's
// --name and the membership API's add both use it, so every member the API
// accepts can be started under its name.
func CheckMemberName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if !memberNamePattern.MatchString(name) {
		return errors.New("want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	return nil
}
