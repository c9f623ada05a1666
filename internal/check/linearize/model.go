package linearize

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of a client operation.
type Kind int

// The operations of the versioned-register model.
const (
	Get Kind = iota // read a key
	Put             // write a key unconditionally
	CAS             // write a key if its version equals Input.Expect (0: it must not exist)
)

func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case CAS:
		return "cas"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Input is an operation as the client issued it.
type Input struct {
	Kind   Kind
	Key    string
	Value  string // written value, for Put and CAS; unique in the history
	Expect uint64 // CAS: the version the key must have; 0 means absent
}

// Output is what the client observed.
type Output struct {
	// Unknown: the outcome of a write is unknown (timeout, 503, lost
	// connection). Its operation gets Return = math.MaxInt64.
	Unknown bool
	// Found: a get saw the key; Value and Version are what it read.
	Found bool
	Value string
	// Version: for a get, the version read; for a successful write, the
	// version the write created.
	Version uint64
	// Refused: a CAS whose precondition failed (definitely not applied).
	Refused bool
}

// State is one key's register. The zero State is an absent key.
type State struct {
	Exists  bool
	Value   string
	Version uint64
}

func (s State) String() string {
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("%q@v%d", s.Value, s.Version)
}

// Step applies in to s as observed by out. It reports whether that
// observation is legal from s and the state after it.
func Step(s State, in Input, out Output) (bool, State) {
	switch in.Kind {
	case Get:
		if out.Unknown {
			return true, s // a read never changes the state
		}
		if !out.Found {
			return !s.Exists, s
		}
		return s.Exists && out.Value == s.Value && out.Version == s.Version, s
	case Put:
		next := State{Exists: true, Value: in.Value, Version: s.Version + 1}
		if out.Unknown {
			return true, next
		}
		return !out.Refused && out.Version == next.Version, next
	case CAS:
		holds := (in.Expect == 0 && !s.Exists) || (in.Expect != 0 && s.Exists && s.Version == in.Expect)
		next := State{Exists: true, Value: in.Value, Version: s.Version + 1}
		switch {
		case out.Unknown:
			// Linearized here it took effect iff its precondition held; the
			// case "it never happened" is covered by linearizing it last.
			if holds {
				return true, next
			}
			return true, s
		case out.Refused:
			return !holds, s
		default:
			return holds && out.Version == next.Version, next
		}
	}
	return false, s
}

// Model is the Porcupine model of per-key versioned registers, partitioned
// by key. Inputs are Input values, outputs Output values, states State values.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() any { return State{} },
		Step: func(state, input, output any) (bool, any) {
			ok, next := Step(state.(State), input.(Input), output.(Output))
			return ok, next
		},
		Equal: func(a, b any) bool { return a.(State) == b.(State) },
		Hash: func(state any) uint64 {
			s := state.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%t|%d|%s", s.Exists, s.Version, s.Value)
			return h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState:     func(state any) string { return state.(State).String() },
	}
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		key := op.Input.(Input).Key
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	var call string
	switch in.Kind {
	case Get:
		call = fmt.Sprintf("get(%s)", in.Key)
	case Put:
		call = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
	case CAS:
		call = fmt.Sprintf("cas(%s, v%d -> %q)", in.Key, in.Expect, in.Value)
	}
	switch {
	case out.Unknown:
		return call + " -> ?"
	case out.Refused:
		return call + " -> refused"
	case in.Kind == Get && !out.Found:
		return call + " -> absent"
	case in.Kind == Get:
		return fmt.Sprintf("%s -> %q@v%d", call, out.Value, out.Version)
	default:
		return fmt.Sprintf("%s -> v%d", call, out.Version)
	}
}
