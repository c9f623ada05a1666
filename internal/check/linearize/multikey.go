package linearize

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The multi-key model: versioned registers on a few keys, read and written
// one at a time or written several at once by a transaction. Transactions
// tie keys together, so its histories are not partitioned by key: keep them
// to a few keys and clients.

// MultiKind is the kind of an operation of the multi-key model.
type MultiKind int

// The operations of the multi-key model.
const (
	MultiGet MultiKind = iota // read Key
	MultiPut                  // write Key unconditionally
	MultiTxn                  // write every Sets entry at once, if every precondition holds
)

// TxnSet is one write of a transaction: Key gets Value if its version is
// Expect (0: any version; the key must exist either way, as a set needs).
type TxnSet struct {
	Key    string
	Value  string
	Expect uint64
}

// MultiInput is an operation of the multi-key model. A transaction's Sets
// name distinct keys.
type MultiInput struct {
	Kind  MultiKind
	Key   string // get, put
	Value string // put; unique in the history
	Sets  []TxnSet
}

// MultiOutput is what the client observed: as Output, and for an applied
// transaction the version each set created.
type MultiOutput struct {
	Unknown  bool
	Found    bool
	Value    string
	Version  uint64
	Refused  bool     // a transaction refused (definitely not applied)
	Versions []uint64 // an applied transaction: per set
}

// MultiState maps each key to its register, sorted by key.
type MultiState []KeyState

// KeyState is one key's register in a MultiState.
type KeyState struct {
	Key string
	State
}

func (s MultiState) get(key string) State {
	if i, ok := slices.BinarySearchFunc(s, key, func(k KeyState, key string) int { return strings.Compare(k.Key, key) }); ok {
		return s[i].State
	}
	return State{}
}

// with returns a copy of s where key holds st.
func (s MultiState) with(key string, st State) MultiState {
	next := slices.Clone(s)
	i, ok := slices.BinarySearchFunc(next, key, func(k KeyState, key string) int { return strings.Compare(k.Key, key) })
	if ok {
		next[i].State = st
		return next
	}
	return slices.Insert(next, i, KeyState{Key: key, State: st})
}

func (s MultiState) String() string {
	parts := make([]string, len(s))
	for i, k := range s {
		parts[i] = k.Key + "=" + k.State.String()
	}
	return strings.Join(parts, " ")
}

// MultiStep applies in to s as observed by out, as Step does for one key.
func MultiStep(s MultiState, in MultiInput, out MultiOutput) (bool, MultiState) {
	switch in.Kind {
	case MultiGet, MultiPut:
		kind := Get
		if in.Kind == MultiPut {
			kind = Put
		}
		ok, next := Step(s.get(in.Key), Input{Kind: kind, Key: in.Key, Value: in.Value},
			Output{Unknown: out.Unknown, Found: out.Found, Value: out.Value, Version: out.Version})
		return ok, s.with(in.Key, next)
	case MultiTxn:
		return txnStep(s, in, out)
	}
	return false, s
}

func txnStep(s MultiState, in MultiInput, out MultiOutput) (bool, MultiState) {
	holds, next := true, s
	created := make([]uint64, len(in.Sets))
	for i, set := range in.Sets {
		st := s.get(set.Key)
		if !st.Exists || set.Expect != 0 && st.Version != set.Expect {
			holds = false
		}
		created[i] = st.Version + 1
		next = next.with(set.Key, State{Exists: true, Value: set.Value, Version: created[i]})
	}
	switch {
	case out.Unknown:
		if holds {
			return true, next
		}
		return true, s
	case out.Refused:
		return !holds, s
	default:
		return holds && slices.Equal(out.Versions, created), next
	}
}

// MultiModel is the Porcupine model of the multi-key registers.
func MultiModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return MultiState(nil) },
		Step: func(state, input, output any) (bool, any) {
			ok, next := MultiStep(state.(MultiState), input.(MultiInput), output.(MultiOutput))
			return ok, next
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(MultiState), b.(MultiState)) },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			fmt.Fprint(h, state.(MultiState).String())
			return h.Sum64()
		},
		DescribeOperation: describeMultiOperation,
		DescribeState:     func(state any) string { return state.(MultiState).String() },
	}
}

func describeMultiOperation(input, output any) string {
	in, out := input.(MultiInput), output.(MultiOutput)
	var call string
	switch in.Kind {
	case MultiGet:
		call = fmt.Sprintf("get(%s)", in.Key)
	case MultiPut:
		call = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
	default:
		sets := make([]string, len(in.Sets))
		for i, set := range in.Sets {
			sets[i] = fmt.Sprintf("%s@v%d=%q", set.Key, set.Expect, set.Value)
		}
		call = "txn(" + strings.Join(sets, ", ") + ")"
	}
	switch {
	case out.Unknown:
		return call + " -> ?"
	case out.Refused:
		return call + " -> refused"
	case in.Kind == MultiGet && !out.Found:
		return call + " -> absent"
	case in.Kind == MultiGet:
		return fmt.Sprintf("%s -> %q@v%d", call, out.Value, out.Version)
	case in.Kind == MultiTxn:
		return fmt.Sprintf("%s -> %v", call, out.Versions)
	default:
		return fmt.Sprintf("%s -> v%d", call, out.Version)
	}
}
