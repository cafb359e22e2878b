package host

import (
	"bytes"
	"testing"
)

// wasmHeader is the magic and version that customSection skips.
var wasmHeader = []byte("\x00asm\x01\x00\x00\x00")

func wasmOf(sections ...[]byte) []byte {
	return append(append([]byte{}, wasmHeader...), bytes.Join(sections, nil)...)
}

// TestCustomSection walks well-formed and malformed section lists: a malformed one has
// no section, and none makes the walker read past the binary.
func TestCustomSection(t *testing.T) {
	t.Parallel()
	custom := func(name, body string) []byte {
		c := append([]byte{byte(len(name))}, name...)
		c = append(c, body...)
		return append([]byte{0, byte(len(c))}, c...)
	}
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
		ok   bool
	}{
		{"found", wasmOf(custom("wasmjobs.js", "src")), "src", true},
		{"after a type section", wasmOf([]byte{1, 1, 0}, custom("other", "x"), custom("wasmjobs.js", "y")), "y", true},
		{"empty body", wasmOf(custom("wasmjobs.js", "")), "", true},
		{"absent", wasmOf(custom("other", "x")), "", false},
		{"too short", []byte("\x00asm"), "", false},
		{"header only", wasmHeader, "", false},
		{"truncated size", wasmOf([]byte{0, 0x80}), "", false},
		{"size past the end", wasmOf([]byte{0, 10, 1, 'a'}), "", false},
		{"bad name length", wasmOf([]byte{0, 2, 0x80, 0x80}), "", false},
		{"name longer than body", wasmOf([]byte{0, 3, 5, 'a', 'b'}), "", false},
		{"name runs past its section", wasmOf([]byte{0, 3, 11, 'w', 'a'}, []byte("smjobs.jsX")), "", false},
		{"5-byte LEB with high bits", wasmOf([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x7f}), "", false},
		{"6-byte LEB", wasmOf([]byte{0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), "", false},
		{"LEB size 2^32-1", wasmOf([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 'a'}), "", false},
	} {
		got, ok := customSection(tc.wasm, "wasmjobs.js")
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzCustomSection: no input makes the walker panic, and what it returns lies inside
// the input.
func FuzzCustomSection(f *testing.F) {
	f.Add(wasmOf([]byte{0, 5, 3, 'a', 'b', 'c', 'x'}))
	f.Add(wasmOf([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x7f}))
	f.Add(wasmOf([]byte{0, 3, 5, 'a', 'b'}))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		got, ok := customSection(wasm, "abc")
		if ok && len(got) > len(wasm) {
			t.Fatalf("a section of %d bytes from %d", len(got), len(wasm))
		}
	})
}
