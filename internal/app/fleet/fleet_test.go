package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, other := filepath.Join(dir, "k"), filepath.Join(dir, "o")
	for _, k := range []string{key, other} {
		if err := GenerateKey(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := GenerateKey(key); err == nil {
		t.Fatal("GenerateKey overwrote a key")
	}
	priv, err := ReadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ReadPublicKey(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	otherPriv, err := ReadPrivateKey(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPublicKey(key); err == nil {
		t.Fatal("a private key read as a public one")
	}
	base := Push{Kind: KindModule, Name: "m", Version: "v", Manifest: []byte("x"), Wasm: []byte("wasm"), PushedAt: time.Unix(1, 2)}
	for _, tc := range []struct {
		name   string
		change func(p *Push)
		want   error
	}{
		{"signed", func(p *Push) { p.Sign(priv) }, nil},
		{"unsigned", func(p *Push) {}, ErrUnsigned},
		{"other key", func(p *Push) { p.Sign(otherPriv) }, ErrBadSignature},
		{"wasm changed", func(p *Push) { p.Sign(priv); p.Wasm = []byte("evil") }, ErrBadSignature},
		{"manifest changed", func(p *Push) { p.Sign(priv); p.Manifest = []byte("y") }, ErrBadSignature},
		{"name changed", func(p *Push) { p.Sign(priv); p.Name = "n" }, ErrBadSignature},
		{"replayed as newer", func(p *Push) { p.Sign(priv); p.PushedAt = p.PushedAt.Add(time.Hour) }, ErrBadSignature},
		{"turned into a removal", func(p *Push) { p.Sign(priv); p.Kind = KindRemove }, ErrBadSignature},
	} {
		p := base
		tc.change(&p)
		if err := p.Verify(pub); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"resize": true, "a.b-c_d": true, "": false, ".hidden": false, "../x": false, "a/b": false, "..": false, "-x": false,
	} {
		if err := CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v", name, err)
		}
	}
}

func TestWriteAndRemoveModule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "<none>"
		}
		return string(b)
	}
	if changed, err := WriteModule(dir, "m", []byte("man"), []byte("w1")); err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	if read("m.toml") != "man" || read("m.wasm") != "w1" {
		t.Fatalf("files: %q %q", read("m.toml"), read("m.wasm"))
	}
	if changed, err := WriteModule(dir, "m", []byte("man"), []byte("w1")); err != nil || changed {
		t.Fatalf("the same write again changed files: %v %v", changed, err)
	}
	// A push without a manifest takes the stale one away.
	if changed, err := WriteModule(dir, "m", nil, []byte("w2")); err != nil || !changed {
		t.Fatalf("write without a manifest: %v %v", changed, err)
	}
	if read("m.toml") != "<none>" || read("m.wasm") != "w2" {
		t.Fatalf("files: %q %q", read("m.toml"), read("m.wasm"))
	}
	if _, err := WriteModule(dir, "../m", nil, []byte("w")); !errors.Is(err, ErrBadName) {
		t.Fatalf("a name out of the directory: %v", err)
	}
	if removed, err := RemoveModule(dir, "m"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	des, _ := os.ReadDir(dir)
	if len(des) != 0 {
		t.Fatalf("left in the directory after the removal: %v", des)
	}
}
