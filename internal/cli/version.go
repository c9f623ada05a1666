package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/internal/buildinfo"
)

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print latchctl's module version, VCS revision and Go version (no server needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			info := buildinfo.Read("latchctl")
			return a.print(info, func(w io.Writer) { fmt.Fprintln(w, info) })
		},
	}
}
