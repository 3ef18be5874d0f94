// Package main is the soak's linearizability checker: porcupine over a key-value model of etcd.
package main

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Op kinds of the workload (hack/soak/workload.py records these).
const (
	OpGet = "get"
	OpPut = "put"
	OpCAS = "cas"
)

// Value is a read result: a key either holds a value or does not exist.
type Value struct {
	Found bool   `json:"found"`
	Value string `json:"value"`
}

func (v Value) String() string {
	if !v.Found {
		return "∅"
	}
	return fmt.Sprintf("%q", v.Value)
}

// Input is what a client asked for, on one key.
type Input struct {
	Op     string
	Key    string
	Value  string // put, cas: the value written
	Expect string // cas: the value compared (etcd's Compare VALUE EQUAL)
}

// Output is what the client saw. Known is false for an indeterminate write (timeout, connection
// lost after the request was sent): it may or may not have taken effect, so any outcome fits.
type Output struct {
	Known     bool
	Succeeded bool   // cas: the comparison held and the value was written
	Result    *Value // get: the value read; put: the previous value; cas failed: the current value
}

// step is the sequential specification of one key (the model is partitioned per key).
func step(state Value, in Input, out Output) (bool, Value) {
	written := Value{Found: true, Value: in.Value}
	switch in.Op {
	case OpGet:
		return out.Known && out.Result != nil && *out.Result == state, state
	case OpPut:
		if out.Known && out.Result != nil && *out.Result != state {
			return false, state
		}
		return true, written
	case OpCAS:
		// etcd: a value compare on a key that does not exist is false.
		holds := state.Found && state.Value == in.Expect
		if !out.Known {
			if holds {
				return true, written
			}
			return true, state
		}
		if out.Succeeded {
			return holds, written
		}
		if holds || (out.Result != nil && *out.Result != state) {
			return false, state
		}
		return true, state
	}
	return false, state
}

// partitionByKey splits a history into one sub-history per key, in key order (so that a
// partition's index names its key).
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		key := op.Input.(Input).Key
		byKey[key] = append(byKey[key], op)
	}
	keys := sortedKeys(byKey)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func sortedKeys(m map[string][]porcupine.Operation) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func describe(in Input, out Output) string {
	var call string
	switch in.Op {
	case OpGet:
		call = fmt.Sprintf("get(%s)", in.Key)
	case OpPut:
		call = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
	case OpCAS:
		call = fmt.Sprintf("cas(%s, %q -> %q)", in.Key, in.Expect, in.Value)
	default:
		call = in.Op
	}
	switch {
	case !out.Known:
		return call + " -> ? (indeterminate)"
	case in.Op == OpCAS && out.Succeeded:
		return call + " -> ok"
	case in.Op == OpCAS && out.Result != nil:
		return call + " -> failed, was " + out.Result.String()
	case in.Op == OpCAS:
		return call + " -> failed"
	case out.Result != nil:
		return call + " -> " + out.Result.String()
	}
	return call + " -> ok"
}

// KVModel is the porcupine model of the workload's etcd keys.
var KVModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return Value{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(Value), input.(Input), output.(Output))
	},
	Equal: func(a, b interface{}) bool { return a.(Value) == b.(Value) },
	Hash: func(state interface{}) uint64 {
		v := state.(Value)
		h := fnv.New64a()
		if v.Found {
			h.Write([]byte{1})
		}
		h.Write([]byte(v.Value))
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		return describe(input.(Input), output.(Output))
	},
	DescribeState: func(state interface{}) string { return state.(Value).String() },
}
