package zkserver

import "github.com/latch-io/latch/api"

// validWritePath reports whether ZooKeeper takes p as the path of a write
// (create, delete, setData, check): latch's path rules (api.ValidatePath)
// and ZooKeeper's own refusal of the characters U+D800 to U+F8FF and U+FFF0
// to U+FFFF. ZooKeeper checks a path as Java's UTF-16 units, so every
// character above U+FFFF, written as two surrogates, is refused too. Reads
// are not checked for these: ZooKeeper answers a read of such a path (no
// node) and latch serves nodes of any name its HTTP API took.
func validWritePath(p string) bool {
	if api.ValidatePath(p) != nil {
		return false
	}
	for _, r := range p {
		if r >= 0xd800 && r <= 0xf8ff || r >= 0xfff0 {
			return false
		}
	}
	return true
}
