package api

import (
	"strings"
	"unicode/utf8"
)

// MaxPathLen is the longest path, in bytes, that latch accepts.
const MaxPathLen = 1024

// SequenceDigits is the width of the zero-padded counter that a sequential
// create appends to the requested name.
const SequenceDigits = 10

// ValidatePath reports whether p follows docs/api.md's path rules: absolute,
// '/'-separated, no empty, "." or ".." segments, no trailing '/' except for
// the root, at most MaxPathLen bytes, valid UTF-8 without control characters.
// The error is an *Error with CodeInvalidArgument.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return Errorf(CodeInvalidArgument, "path is empty")
	case len(p) > MaxPathLen:
		return Errorf(CodeInvalidArgument, "path is %d bytes, over the limit of %d", len(p), MaxPathLen)
	case p[0] != '/':
		return Errorf(CodeInvalidArgument, "path %q is not absolute", p)
	case p == "/":
		return nil
	case strings.HasSuffix(p, "/"):
		return Errorf(CodeInvalidArgument, "path %q ends with '/'", p)
	case !utf8.ValidString(p):
		return Errorf(CodeInvalidArgument, "path is not valid UTF-8")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return Errorf(CodeInvalidArgument, "path %q has a control character", p)
		}
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return Errorf(CodeInvalidArgument, "path %q has an empty segment", p)
		case ".", "..":
			return Errorf(CodeInvalidArgument, "path %q has a %q segment", p, seg)
		}
	}
	return nil
}

// Parent returns the parent of a valid path; the parent of "/" is "/".
func Parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// Base returns the last segment of a valid path; the base of "/" is "".
func Base(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// Join returns the path of the child name under parent.
func Join(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}
