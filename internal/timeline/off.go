//go:build !latchtimeline

package timeline

// Enabled reports whether the recorder is compiled in (build tag latchtimeline).
const Enabled = false

// Mark records that the calling code reached s; without the build tag it does nothing.
func Mark(Stage) {}

// Dump writes the recorded marks to $LATCH_TIMELINE; without the build tag it does nothing.
func Dump() error { return nil }
