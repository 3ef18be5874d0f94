package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// h builds a history record; ret < 0 means no return (indeterminate).
func h(id, client int, op, key string, call, ret int64, outcome string) Record {
	r := Record{ID: id, Client: client, Op: op, Key: key, Call: call, Outcome: outcome}
	if ret >= 0 {
		r.Return = &ret
	}
	return r
}

func withValue(r Record, v string) Record  { r.Value = &v; return r }
func withExpect(r Record, v string) Record { r.Expect = &v; return r }
func read(r Record, v string) Record       { r.Result = &Value{Found: true, Value: v}; return r }
func readNothing(r Record) Record          { r.Result = &Value{}; return r }
func succeeded(r Record, ok bool) Record   { r.Succeeded = ok; return r }
func put(id, c int, k, v string, call, ret int64, outcome string) Record {
	return withValue(h(id, c, OpPut, k, call, ret, outcome), v)
}
func cas(id, c int, k, expect, v string, call, ret int64, outcome string) Record {
	return withExpect(withValue(h(id, c, OpCAS, k, call, ret, outcome), v), expect)
}
func get(id, c int, k string, call, ret int64) Record { return h(id, c, OpGet, k, call, ret, "ok") }

func check(t *testing.T, records []Record) (int, Verdict) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"operations": records})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{"-timeout", "30s"}, bytes.NewReader(data), &out, &errOut)
	var v Verdict
	if code != 3 {
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("verdict is not JSON: %v\n%s\n%s", err, out.String(), errOut.String())
		}
	}
	return code, v
}

func TestLinearizableHistories(t *testing.T) {
	cases := map[string][]Record{
		"sequential put then get": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			read(get(2, 1, "a", 20, 30), "1"),
		},
		"read concurrent with a put may see either value": {
			readNothing(put(1, 0, "a", "1", 0, 100, "ok")),
			readNothing(get(2, 1, "a", 10, 20)),
			read(get(3, 2, "a", 30, 40), "1"),
		},
		"cas chain with a failed compare that reads the current value": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			succeeded(cas(2, 1, "a", "1", "2", 20, 30, "ok"), true),
			read(succeeded(cas(3, 2, "a", "1", "3", 40, 50, "ok"), false), "2"),
			read(get(4, 0, "a", 60, 70), "2"),
		},
		"indeterminate put seen much later": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			put(2, 1, "a", "2", 20, -1, "indeterminate"),
			read(get(3, 2, "a", 30, 40), "1"),
			read(get(4, 2, "a", 1000, 1010), "2"),
		},
		"indeterminate put never seen": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			put(2, 1, "a", "2", 20, -1, "indeterminate"),
			read(get(3, 2, "a", 1000, 1010), "1"),
		},
		"indeterminate cas that applied": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			cas(2, 1, "a", "1", "2", 20, -1, "indeterminate"),
			read(get(3, 2, "a", 1000, 1010), "2"),
		},
		"failed operations and failed reads are ignored": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			put(2, 1, "a", "2", 20, 25, "failed"),
			h(3, 2, OpGet, "a", 30, -1, "indeterminate"),
			read(get(4, 2, "a", 40, 50), "1"),
		},
		"keys are independent": {
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			readNothing(put(2, 1, "b", "x", 0, 10, "ok")),
			read(get(3, 2, "a", 20, 30), "1"),
			read(get(4, 2, "b", 20, 30), "x"),
		},
	}
	for name, records := range cases {
		t.Run(name, func(t *testing.T) {
			code, v := check(t, records)
			if code != 0 || v.Result != "linearizable" || v.Linearizable == nil || !*v.Linearizable {
				t.Fatalf("want linearizable, got exit %d, %+v", code, v)
			}
		})
	}
}

func TestNonLinearizableHistories(t *testing.T) {
	cases := map[string]struct {
		records []Record
		key     string
	}{
		"stale read after an acknowledged put": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			read(put(2, 1, "a", "2", 20, 30, "ok"), "1"),
			read(get(3, 2, "a", 40, 50), "1"),
		}, "a"},
		"acknowledged write lost": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			readNothing(get(2, 1, "a", 20, 30)),
		}, "a"},
		"two cas from the same value both succeed": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			succeeded(cas(2, 1, "a", "1", "2", 20, 30, "ok"), true),
			succeeded(cas(3, 2, "a", "1", "3", 40, 50, "ok"), true),
		}, "a"},
		"cas fails although the value matched": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			read(succeeded(cas(2, 1, "a", "1", "2", 20, 30, "ok"), false), "1"),
		}, "a"},
		"a definitely failed write shows up": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			put(2, 1, "a", "2", 20, 25, "failed"),
			read(get(3, 2, "a", 40, 50), "2"),
		}, "a"},
		"put reports a previous value that was never there": {[]Record{
			read(put(1, 0, "b", "1", 0, 10, "ok"), "zzz"),
		}, "b"},
		"value read before it was written": {[]Record{
			read(get(1, 0, "a", 0, 10), "1"),
			readNothing(put(2, 1, "a", "1", 20, 30, "ok")),
		}, "a"},
		"reads go back in time": {[]Record{
			readNothing(put(1, 0, "a", "1", 0, 10, "ok")),
			read(put(2, 0, "a", "2", 20, 100, "ok"), "1"),
			read(get(3, 1, "a", 30, 40), "2"),
			read(get(4, 2, "a", 50, 60), "1"),
		}, "a"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			records := append([]Record{readNothing(put(100, 9, "other", "x", 0, 5, "ok"))}, c.records...)
			code, v := check(t, records)
			if code != 1 || v.Result != "not-linearizable" || v.Linearizable == nil || *v.Linearizable {
				t.Fatalf("want not-linearizable, got exit %d, %+v", code, v)
			}
			if len(v.IllegalKeys) != 1 || v.IllegalKeys[0].Key != c.key || len(v.IllegalKeys[0].Stuck) == 0 {
				t.Fatalf("want key %q named (and only it), got %+v", c.key, v.IllegalKeys)
			}
		})
	}
}

func TestInvalidHistories(t *testing.T) {
	bad := []string{
		`{"operations": [{"op": "delete", "key": "a", "call": 0, "return": 1, "outcome": "ok"}]}`,
		`{"operations": [{"op": "put", "key": "a", "call": 0, "return": 1, "outcome": "ok"}]}`,
		`{"operations": [{"op": "cas", "key": "a", "value": "1", "call": 0, "return": 1, "outcome": "ok"}]}`,
		`{"operations": [{"op": "get", "key": "a", "call": 5, "return": 1, "outcome": "ok", "result": {"found": false}}]}`,
		`{"operations": [{"op": "get", "key": "a", "call": 0, "return": 1, "outcome": "ok"}]}`,
		`{"operations": [{"op": "get", "key": "a", "call": 0, "return": 1, "outcome": "maybe"}]}`,
		`{"operations": [{"op": "get", "call": 0, "return": 1, "outcome": "failed"}]}`,
		`not json`,
	}
	for _, doc := range bad {
		var out, errOut bytes.Buffer
		if code := run(nil, strings.NewReader(doc), &out, &errOut); code != 3 || errOut.Len() == 0 {
			t.Errorf("%s: want exit 3 with a message, got %d (%s)", doc, code, errOut.String())
		}
	}
}

func TestBareListAndVisualization(t *testing.T) {
	dir := t.TempDir()
	history := filepath.Join(dir, "history.json")
	doc := `[{"id": 1, "op": "put", "key": "a", "value": "1", "call": 0, "return": 10, "outcome": "ok"},
	         {"id": 2, "client": 1, "op": "get", "key": "a", "call": 20, "return": 30, "outcome": "ok",
	          "result": {"found": false}}]`
	if err := os.WriteFile(history, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, "history.html")
	var out, errOut bytes.Buffer
	code := run([]string{"-history", history, "-html", html}, nil, &out, &errOut)
	if code != 1 {
		t.Fatalf("want exit 1, got %d: %s %s", code, out.String(), errOut.String())
	}
	page, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(page), "put(a, \\\"1\\\")") {
		t.Fatalf("visualization missing or without the operations: %v", err)
	}
}

// refusedWrites is a key's history while etcd refuses writes (NOSPACE): a value read by all,
// then many writes whose outcome is unknown, each followed by reads that still see the old
// value, and a last write that takes effect after the refusals.
func refusedWrites(writes int) []Record {
	records := []Record{readNothing(put(1, 0, "a", "v0", 0, 10, "ok"))}
	at := int64(20)
	for n := 0; n < writes; n++ {
		records = append(records,
			put(100+n, 1+n%3, "a", "refused-"+strings.Repeat("x", n+1), at, -1, "indeterminate"),
			read(get(1000+n, 4, "a", at+5, at+8), "v0"))
		at += 10
	}
	return append(records,
		read(put(2, 0, "a", "v1", at, at+5, "ok"), "v0"),
		read(get(3, 4, "a", at+10, at+15), "v1"))
}

func TestManyRefusedWritesAreCheckedQuickly(t *testing.T) {
	code, v := check(t, refusedWrites(60))
	if code != 0 || v.Result != "linearizable" {
		t.Fatalf("want linearizable, got exit %d, %+v", code, v)
	}
	if v.Unobserved != 60 {
		t.Fatalf("want the 60 writes nobody saw set aside, got %d", v.Unobserved)
	}
}

func TestUnobservedWritesStillCannotHideAViolation(t *testing.T) {
	records := refusedWrites(60)
	// A read of a value nobody wrote: not explained, whatever the refused writes did.
	records = append(records, read(get(4, 4, "a", 5000, 5010), "never-written"))
	if code, v := check(t, records); code != 1 || v.Result != "not-linearizable" {
		t.Fatalf("want not-linearizable, got exit %d, %+v", code, v)
	}
	// A refused write seen by a read is kept: it may have taken effect late (its return is
	// unknown), and only it explains that read.
	seen := append(refusedWrites(60), read(get(5, 4, "a", 5000, 5010), "refused-x"))
	if code, v := check(t, seen); code != 0 || v.Unobserved != 59 {
		t.Fatalf("want linearizable with 59 writes set aside, got exit %d, %+v", code, v)
	}
}
