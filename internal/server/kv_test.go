package server

import (
	"testing"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/internal/command"
)

// TestPreconditionCommand: each precondition the wire layer names maps to
// the command's, and an unknown one is refused with invalid_argument rather
// than read as no condition.
func TestPreconditionCommand(t *testing.T) {
	tests := []struct {
		name string
		in   Precondition
		want command.Precondition
		code api.Code
	}{
		{"any version", AnyVersion, command.PrecondAny, ""},
		{"no node", NoNode, command.PrecondNone, ""},
		{"at version", AtVersion, command.PrecondVersion, ""},
		{"unknown", AtVersion + 1, 0, api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.command()
			var code api.Code
			if err != nil {
				code = api.CodeOf(err)
			}
			if code != tt.code || (err == nil && got != tt.want) {
				t.Fatalf("%d.command() = %d, %v; want %d, code %q", tt.in, got, err, tt.want, tt.code)
			}
		})
	}
}
