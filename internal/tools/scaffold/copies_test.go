package scaffold

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "copy the guest SDKs into sdk/")

func TestSDKCopiesAreCurrent(t *testing.T) {
	for dst, src := range sdkFiles {
		want, err := os.ReadFile(filepath.Join("..", "..", "..", "guest-sdk", src))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("sdk", dst)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not a copy of guest-sdk/%s: run go generate ./internal/tools/scaffold", path, src)
		}
	}
}
