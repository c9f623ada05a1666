package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/latch-io/latch/internal/server"
)

// restoreUsage heads 'latchd restore --help'.
const restoreUsage = `Usage: latchd restore FILE --name N --data-dir D --initial-cluster n1=host:port,... --cluster-token T [--bump-index K]

Prepares the data directory D (which must not exist) of member N of a NEW
cluster seeded from the backup FILE ('latchctl snapshot save'). Run it for
every member with the same FILE, --initial-cluster, --cluster-token and
--bump-index, then start each latchd as usual with the same --name,
--data-dir, --initial-cluster and --cluster-token. The sessions of the old
cluster are gone, and their ephemeral nodes with them. The new log starts
K entries above the backup's index, so fencing tokens and sequential names
stay above any the old cluster issued (K must exceed the entries it
committed after the backup).
`

// runRestore is 'latchd restore': it prepares a data directory and exits.
func runRestore(args []string) error {
	fs := flag.NewFlagSet("latchd restore", flag.ContinueOnError)
	var (
		cfg     server.Config
		initial string
		bump    uint64
	)
	fs.StringVar(&cfg.Name, "name", "", "this member's name in the new cluster")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "the data directory to create (must not exist)")
	fs.StringVar(&initial, "initial-cluster", "", "name=host:port of every member of the new cluster, comma-separated")
	fs.StringVar(&cfg.ClusterToken, "cluster-token", "", "the new cluster's token (must differ from the backed-up cluster's)")
	fs.Uint64Var(&bump, "bump-index", server.DefaultRestoreBump, "entries between the backup's index and the new log's first")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), restoreUsage)
		fs.PrintDefaults()
	}
	fs.SetOutput(io.Discard)
	file, flagArgs := splitFile(args)
	if err := fs.Parse(flagArgs); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return err
		}
		return usageError{fmt.Errorf("restore: %w", err)}
	}
	if err := checkRestoreFlags(fs, &cfg, file, initial, bump); err != nil {
		return usageError{fmt.Errorf("restore: %w", err)}
	}
	restored, err := server.Restore(cfg, server.RestoreOptions{File: file, BumpIndex: bump})
	if err != nil {
		return err
	}
	fmt.Printf("restored %s into %s for member %s: backup index %d, new log starts above %d\n",
		file, cfg.DataDir, cfg.Name, restored.Header.MaxIndex(), restored.Index)
	return nil
}

// splitFile takes FILE, the one argument that is not a flag, out of args,
// wherever it is.
func splitFile(args []string) (string, []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "", args
}

func checkRestoreFlags(fs *flag.FlagSet, cfg *server.Config, file, initial string, bump uint64) error {
	switch {
	case file == "":
		return fmt.Errorf("the backup FILE comes first: latchd restore FILE --name ...")
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.DataDir == "":
		return fmt.Errorf("--data-dir is required")
	case initial == "":
		return fmt.Errorf("--initial-cluster is required: the members of the new cluster")
	case bump == 0:
		return fmt.Errorf("--bump-index must be positive")
	}
	if err := checkMemberName(cfg.Name); err != nil {
		return fmt.Errorf("--name %q: %w", cfg.Name, err)
	}
	if err := checkClusterToken(cfg.ClusterToken); err != nil {
		return fmt.Errorf("--cluster-token %q: %w", cfg.ClusterToken, err)
	}
	members, err := initialCluster(cfg, initial)
	if err != nil {
		return err
	}
	cfg.InitialCluster = members
	return nil
}
