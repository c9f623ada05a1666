package fsm

import (
	"errors"
	"io"
)

// ErrCorruptSnapshot is wrapped by every ReadSnapshot error about its input.
var ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

// WriteSnapshot serialises f to w. Not yet implemented.
func (f *FSM) WriteSnapshot(w io.Writer) error { return errors.New("fsm: WriteSnapshot not implemented yet") }

// ReadSnapshot reads a snapshot written by WriteSnapshot. Not yet implemented.
func ReadSnapshot(r io.Reader) (*FSM, error) { return nil, errors.New("fsm: ReadSnapshot not implemented yet") }

// Hash returns a fingerprint of the whole replicated state. Not yet implemented.
func (f *FSM) Hash() uint64 { return 0 }
