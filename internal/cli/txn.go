package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/latch-io/latch/api"
	"github.com/latch-io/latch/client"
)

const txnLong = `txn applies operations all or nothing at one index (docs/api.md POST /v1/txn).
The operations come from FILE ("-": stdin) as JSON, either the request body
{"ops": [...]} or the array of operations alone, for example

  [{"op":"check","path":"/jobs"},
   {"op":"set","path":"/accounts/alice","value":"70","version":1},
   {"op":"create","path":"/jobs/job-","value":"x","sequential":true}]

or, in order, from --op flags, each KIND:PATH[@VERSION][=VALUE]:

  create:PATH[=VALUE]  create-ephemeral:PATH[=VALUE] (with --session)
  create-sequential:PATH[=VALUE]  create-ephemeral-sequential:PATH[=VALUE]
  set:PATH[@VERSION]=VALUE  delete:PATH[@VERSION]  delete-recursive:PATH[@VERSION]
  check:PATH[@VERSION]  (VERSION 0: PATH must not exist)

(a path holding '@' or '=' needs the JSON form). It prints one line per
operation (-o json: the reply). A refused transaction changes nothing; the
error names the operation at fault, from 0.`

func (a *app) txnCommand() *cobra.Command {
	var specs []string
	var sessionID string
	cmd := &cobra.Command{
		Use:   "txn [FILE] | txn --op KIND:PATH... ",
		Short: "apply several operations all or nothing",
		Long:  txnLong,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.txnOps(args, specs)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				txn := c.Txn()
				if sessionID != "" {
					s, err := c.ResumeSession(ctx, sessionID)
					if err != nil {
						return err
					}
					defer s.Orphan() // the session belongs to someone else: leave it open
					txn.WithSession(s)
				}
				for _, op := range ops {
					txn.Op(op)
				}
				reply, err := txn.Commit(ctx)
				return a.printResult(reply, err, func(w io.Writer) { printTxn(w, reply) })
			})
		},
	}
	cmd.Flags().StringArrayVar(&specs, "op", nil, "an operation KIND:PATH[@VERSION][=VALUE], repeatable, applied in order")
	cmd.Flags().StringVar(&sessionID, "session", "", "session id the transaction belongs to (owner of its ephemeral creates)")
	return cmd
}

func printTxn(w io.Writer, reply *api.Txn) {
	for _, r := range reply.Results {
		fmt.Fprintf(w, "%s %s version %d\n", r.Op, r.Path, r.Version)
	}
}

// txnOps reads the operations from the file argument or the --op flags.
func (a *app) txnOps(args, specs []string) ([]api.TxnOp, error) {
	switch {
	case len(args) == 1 && len(specs) > 0:
		return nil, usagef("give the operations in FILE or with --op, not both")
	case len(specs) > 0:
		ops := make([]api.TxnOp, len(specs))
		for i, spec := range specs {
			op, err := parseTxnSpec(spec)
			if err != nil {
				return nil, usagef("--op %q: %v", spec, err)
			}
			ops[i] = op
		}
		return ops, nil
	case len(args) == 0:
		return nil, usagef("no operation: give FILE (- for stdin) or --op flags")
	}
	data, err := a.readTxnFile(args[0])
	if err != nil {
		return nil, err
	}
	return parseTxnJSON(data)
}

func (a *app) readTxnFile(name string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(a.io.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read operations from stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, usagef("read operations: %v", err)
	}
	return data, nil
}

// parseTxnJSON reads {"ops": [...]} or [...]; unknown fields are refused
// here already, as the server would.
func parseTxnJSON(data []byte) ([]api.TxnOp, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var req api.TxnRequest
		if err := decodeJSONStrict(trimmed, &req); err != nil {
			return nil, err
		}
		if req.SessionID != "" || req.RequestSeq != 0 {
			return nil, usagef("operations file: give the session with --session, not in the file")
		}
		return req.Ops, nil
	}
	var ops []api.TxnOp
	if err := decodeJSONStrict(trimmed, &ops); err != nil {
		return nil, err
	}
	return ops, nil
}

func decodeJSONStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return usagef("operations file: %v", err)
	}
	if dec.More() {
		return usagef("operations file: data after the operations")
	}
	return nil
}

var txnSpecKinds = map[string]api.TxnOp{
	"create":                      {Op: api.TxnCreate},
	"create-ephemeral":            {Op: api.TxnCreate, Ephemeral: true},
	"create-sequential":           {Op: api.TxnCreate, Sequential: true},
	"create-ephemeral-sequential": {Op: api.TxnCreate, Ephemeral: true, Sequential: true},
	"set":                         {Op: api.TxnSet},
	"delete":                      {Op: api.TxnDelete},
	"delete-recursive":            {Op: api.TxnDelete, Recursive: true},
	"check":                       {Op: api.TxnCheck},
}

// parseTxnSpec parses KIND:PATH[@VERSION][=VALUE].
func parseTxnSpec(spec string) (api.TxnOp, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	op, known := txnSpecKinds[kind]
	if !ok || !known {
		return api.TxnOp{}, fmt.Errorf("want KIND:PATH with KIND one of create, create-ephemeral, create-sequential, create-ephemeral-sequential, set, delete, delete-recursive, check")
	}
	if path, value, hasValue := strings.Cut(rest, "="); hasValue {
		rest, op.Value = path, &value
	}
	if path, version, hasVersion := strings.Cut(rest, "@"); hasVersion {
		n, err := strconv.ParseUint(version, 10, 64)
		if err != nil {
			return api.TxnOp{}, fmt.Errorf("version %q is not a number", version)
		}
		rest, op.Version = path, &n
	}
	op.Path = rest
	return op, nil
}
