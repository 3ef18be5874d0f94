// Command checker decides whether a recorded etcd client history is linearizable.
//
// It reads the history the soak workload wrote (hack/soak/workload.py; a JSON object with an
// "operations" list, or the bare list) from a file or stdin, checks it with porcupine against a
// key-value model partitioned per key (get, put returning the previous value, compare-and-swap
// on the value), and prints a JSON verdict on stdout. With -html it also writes porcupine's
// visualization when the history is not linearizable (or always, with -html-always).
//
// Exit status: 0 linearizable, 1 not linearizable, 2 unknown (the check timed out),
// 3 unreadable or invalid history.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one operation as the workload writes it.
type Record struct {
	ID        int     `json:"id"`
	Client    int     `json:"client"`
	Op        string  `json:"op"`
	Key       string  `json:"key"`
	Value     *string `json:"value"`
	Expect    *string `json:"expect"`
	Call      int64   `json:"call"`
	Return    *int64  `json:"return"`
	Outcome   string  `json:"outcome"` // ok, failed (definitely not applied), indeterminate
	Succeeded bool    `json:"succeeded"`
	Result    *Value  `json:"result"`
	Error     string  `json:"error"`
}

// Verdict is what the checker prints.
type Verdict struct {
	Result        string       `json:"result"` // linearizable, not-linearizable, unknown
	Linearizable  *bool        `json:"linearizable"`
	Operations    int          `json:"operations"`
	Checked       int          `json:"checked"`
	Indeterminate int          `json:"indeterminate"`
	Ignored       int          `json:"ignored"`
	Unobserved    int          `json:"unobserved"`
	Keys          int          `json:"keys"`
	IllegalKeys   []IllegalKey `json:"illegal_keys"`
	Seconds       float64      `json:"seconds"`
	Visualization string       `json:"visualization,omitempty"`
}

// IllegalKey names a key whose history has no linearization, and the operations that could
// not be placed after the longest linearizable prefix found.
type IllegalKey struct {
	Key          string   `json:"key"`
	Operations   int      `json:"operations"`
	Linearizable int      `json:"longest_linearizable_prefix"`
	Stuck        []string `json:"not_linearized"`
}

type meta struct {
	ID    int
	Error string
}

// toOperations keeps what constrains the history: every successful operation and every write
// whose outcome is unknown (it may have happened at any time after its call, so it returns at
// +inf). Failed operations (definitely not applied) and failed reads carry no information.
func toOperations(records []Record) ([]porcupine.Operation, int, int, error) {
	var ops []porcupine.Operation
	indeterminate, ignored := 0, 0
	for i, r := range records {
		where := fmt.Sprintf("operation %d (id %d)", i, r.ID)
		in := Input{Op: r.Op, Key: r.Key}
		switch r.Op {
		case OpGet:
		case OpPut, OpCAS:
			if r.Value == nil {
				return nil, 0, 0, fmt.Errorf("%s: %s without a value", where, r.Op)
			}
			in.Value = *r.Value
			if r.Op == OpCAS {
				if r.Expect == nil {
					return nil, 0, 0, fmt.Errorf("%s: cas without expect", where)
				}
				in.Expect = *r.Expect
			}
		default:
			return nil, 0, 0, fmt.Errorf("%s: unknown op %q (get, put, cas)", where, r.Op)
		}
		if r.Key == "" {
			return nil, 0, 0, fmt.Errorf("%s: no key", where)
		}
		op := porcupine.Operation{ClientId: r.Client, Input: in, Call: r.Call, Metadata: meta{r.ID, r.Error}}
		switch r.Outcome {
		case "ok":
			if r.Return == nil || *r.Return < r.Call {
				return nil, 0, 0, fmt.Errorf("%s: ok without a return time at or after its call", where)
			}
			if r.Op == OpGet && r.Result == nil {
				return nil, 0, 0, fmt.Errorf("%s: ok get without a result", where)
			}
			op.Return = *r.Return
			op.Output = Output{Known: true, Succeeded: r.Succeeded, Result: r.Result}
		case "indeterminate":
			if r.Op == OpGet {
				ignored++
				continue
			}
			indeterminate++
			op.Return = math.MaxInt64
			op.Output = Output{Known: false}
		case "failed":
			ignored++
			continue
		default:
			return nil, 0, 0, fmt.Errorf("%s: unknown outcome %q (ok, failed, indeterminate)", where, r.Outcome)
		}
		ops = append(ops, op)
	}
	return ops, indeterminate, ignored, nil
}

// setAsideUnobserved leaves out every write of unknown outcome whose value no operation saw
// (no read, previous value or failed compare returned it, no successful compare expected it).
// Such a write can always take effect last, after everything else (its return is +inf), so it
// never decides the verdict; kept, it doubles porcupine's search at each read that follows it,
// and a few dozen writes refused during an outage (NOSPACE answers every put) time it out.
// Values are unique per write, so "saw" is exact.
func setAsideUnobserved(ops []porcupine.Operation) ([]porcupine.Operation, int) {
	type keyValue struct{ key, value string }
	seen := map[keyValue]bool{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if !out.Known {
			continue
		}
		if out.Result != nil && out.Result.Found {
			seen[keyValue{in.Key, out.Result.Value}] = true
		}
		if in.Op == OpCAS && out.Succeeded {
			seen[keyValue{in.Key, in.Expect}] = true
		}
	}
	kept := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if !out.Known && !seen[keyValue{in.Key, in.Value}] {
			continue
		}
		kept = append(kept, op)
	}
	return kept, len(ops) - len(kept)
}

func readRecords(r io.Reader) ([]Record, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var wrapped struct {
		Operations *[]Record `json:"operations"`
	}
	if err := json.Unmarshal(data, &wrapped); err == nil && wrapped.Operations != nil {
		return *wrapped.Operations, nil
	}
	var bare []Record
	if err := json.Unmarshal(data, &bare); err != nil {
		return nil, fmt.Errorf("not a history (want {\"operations\": [...]} or a list): %w", err)
	}
	return bare, nil
}

// illegalKeys names the partitions without a complete linearization.
func illegalKeys(ops []porcupine.Operation, info porcupine.LinearizationInfo) []IllegalKey {
	var out []IllegalKey
	partitions := partitionByKey(ops)
	partials := info.PartialLinearizations()
	for p, part := range partitions {
		longest := 0
		placed := map[int]bool{}
		if p < len(partials) {
			for _, seq := range partials[p] {
				if len(seq) > longest {
					longest = len(seq)
				}
				for _, id := range seq {
					placed[id] = true
				}
			}
		}
		if longest == len(part) {
			continue
		}
		item := IllegalKey{Key: part[0].Input.(Input).Key, Operations: len(part), Linearizable: longest}
		for id, op := range part {
			if !placed[id] && len(item.Stuck) < 10 {
				m := op.Metadata.(meta)
				item.Stuck = append(item.Stuck, fmt.Sprintf("#%d client %d: %s", m.ID, op.ClientId,
					describe(op.Input.(Input), op.Output.(Output))))
			}
		}
		out = append(out, item)
	}
	return out
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("checker", flag.ContinueOnError)
	flags.SetOutput(stderr)
	historyPath := flags.String("history", "-", "history file (- for stdin)")
	timeout := flags.Duration("timeout", 5*time.Minute, "give up (verdict unknown) after this long; 0 = never")
	htmlPath := flags.String("html", "", "write porcupine's HTML visualization here when not linearizable")
	htmlAlways := flags.Bool("html-always", false, "write the visualization whatever the verdict")
	if err := flags.Parse(args); err != nil {
		return 3
	}
	in := stdin
	if *historyPath != "-" {
		f, err := os.Open(*historyPath)
		if err != nil {
			fmt.Fprintf(stderr, "checker: %v\n", err)
			return 3
		}
		defer f.Close()
		in = f
	}
	records, err := readRecords(in)
	if err != nil {
		fmt.Fprintf(stderr, "checker: %v\n", err)
		return 3
	}
	ops, indeterminate, ignored, err := toOperations(records)
	if err != nil {
		fmt.Fprintf(stderr, "checker: invalid history: %v\n", err)
		return 3
	}
	ops, unobserved := setAsideUnobserved(ops)
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.Input.(Input).Key] = true
	}
	started := time.Now()
	result, info := porcupine.CheckOperationsVerbose(KVModel, ops, *timeout)
	verdict := Verdict{
		Operations:    len(records),
		Checked:       len(ops),
		Indeterminate: indeterminate,
		Ignored:       ignored,
		Unobserved:    unobserved,
		Keys:          len(keys),
		IllegalKeys:   []IllegalKey{},
		Seconds:       math.Round(time.Since(started).Seconds()*1000) / 1000,
	}
	code := 0
	switch result {
	case porcupine.Ok:
		yes := true
		verdict.Result, verdict.Linearizable = "linearizable", &yes
	case porcupine.Illegal:
		no := false
		verdict.Result, verdict.Linearizable = "not-linearizable", &no
		verdict.IllegalKeys = illegalKeys(ops, info)
		code = 1
	default:
		verdict.Result = "unknown"
		code = 2
	}
	if *htmlPath != "" && (*htmlAlways || result == porcupine.Illegal) {
		model := KVModel
		model.DescribeOperationMetadata = func(m interface{}) string {
			if m == nil {
				return ""
			}
			x := m.(meta)
			if x.Error != "" {
				return fmt.Sprintf("#%d: %s", x.ID, x.Error)
			}
			return fmt.Sprintf("#%d", x.ID)
		}
		if err := porcupine.VisualizePath(model, info, *htmlPath); err != nil {
			fmt.Fprintf(stderr, "checker: visualization: %v\n", err)
		} else {
			verdict.Visualization = *htmlPath
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(verdict); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		fmt.Fprintf(stderr, "checker: %v\n", err)
		return 3
	}
	return code
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
