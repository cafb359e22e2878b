package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/worker"
)

// FuzzParseManifest: no manifest text makes the parser panic; every refusal is a
// ManifestError naming the file, at a line the text has.
func FuzzParseManifest(f *testing.F) {
	for _, seed := range []string{"", "queue = \"mail\"\n", "enqueue = [\"a\", \"b\"]", "memory = \"64MiB\"\ntimeout = \"5s\"",
		"env = [\"A=b\"]", "dirs = [\"/a:/b\"]", "[section]", "queue = \"unterminated", "x = [\"a\\\"b\"]", "max_attempts = 1_000",
		"[env]\nA = 'b'\n", "enqueue = [\n 'a', # c\n]\n", "env = { A = \"\\u00e9\" }", "queue = \"\\a\"", "max_attempts = 1__0",
		"[env]\nA.B = 1\n[[dirs]]\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, err := host.ParseManifest("m.toml", []byte(text))
		var me *host.ManifestError
		if err != nil && (!errors.As(err, &me) || !strings.HasPrefix(err.Error(), "m.toml")) {
			t.Fatalf("error %v is not a ManifestError naming the file", err)
		}
		if me != nil && (me.Line < 0 || me.Line > strings.Count(text, "\n")+1) {
			t.Fatalf("error %v points at line %d of a text of %d lines", err, me.Line, strings.Count(text, "\n")+1)
		}
	})
}

// FuzzHostFunctionPointers passes fuzzed pointer/length pairs to each host function:
// the job acks (the pair was inside memory) or fails with an invalid memory access in
// that function; the host never panics and keeps serving.
func FuzzHostFunctionPointers(f *testing.F) {
	e := newEngine(f)
	m := loadFile(f, e, "hostile/fuzzptr", "")
	seed := func(sel byte, p, n uint32) []byte {
		b := make([]byte, 9)
		b[0] = sel
		binary.LittleEndian.PutUint32(b[1:], p)
		binary.LittleEndian.PutUint32(b[5:], n)
		return b
	}
	for sel := byte(0); sel < 9; sel++ {
		f.Add(seed(sel, 100, 10))
		f.Add(seed(sel, 65530, 16))
		f.Add(seed(sel, 16, 0xFFFFFFF0))
		f.Add(seed(sel, 0xFFFFFFFF, 1))
	}
	names := []string{"payload_read", "meta_read", "header_read", "header_read", "log", "set_reason", "output_write", "enqueue", "enqueue"}
	f.Fuzz(func(t *testing.T, payload []byte) {
		job := &worker.Job{Envelope: backend.NewEnvelope("fuzzptr", payload), Attempt: 1, MaxAttempts: 3}
		x := m.Run(context.Background(), job, nil)
		if len(payload) < 9 {
			return // the module read zeros past the payload
		}
		want := "trap: invalid memory access in " + names[payload[0]%9]
		if x.Outcome != worker.Ack && x.Reason != want {
			t.Fatalf("payload %x: %s %q, want ack or %q", payload, x.Ending(), x.Reason, want)
		}
	})
}
