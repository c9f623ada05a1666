// Command latchctl is latch's command-line client; see internal/cli for the
// commands, the LATCH_ENDPOINTS variable and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/latch-io/latch/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.StdIO())
	stop()
	os.Exit(code)
}
