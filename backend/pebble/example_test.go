package pebble_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wasmjobs/wasmjobs/backend"
	pebblebackend "github.com/wasmjobs/wasmjobs/backend/pebble"
)

// Open a data directory, say what was waiting, publish, and close. A second Open of the
// same directory fails at once with ErrLocked.
func ExampleOpen() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "wasmjobs-example")
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "wasmjobs-data")

	b, err := pebblebackend.Open(ctx, pebblebackend.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec := b.Recovered()
	fmt.Printf("found %d jobs waiting, %d delayed\n", rec.Ready, rec.Delayed)
	if err := b.Declare(ctx, backend.QueueConfig{Name: "resize"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Publish(ctx, backend.NewEnvelope("resize", []byte(`{"w":640}`)), 0); err != nil {
		fmt.Println(err) // errors.Is(err, pebblebackend.ErrDiskFull): answer 503
	}

	_, err = pebblebackend.Open(ctx, pebblebackend.Config{Dir: dir})
	fmt.Println("second open locked:", errors.Is(err, pebblebackend.ErrLocked))
	b.Close(ctx)

	b, _ = pebblebackend.Open(ctx, pebblebackend.Config{Dir: dir})
	fmt.Printf("after a restart: %d waiting\n", b.Recovered().Ready)
	b.Close(ctx)
	// Output:
	// found 0 jobs waiting, 0 delayed
	// second open locked: true
	// after a restart: 1 waiting
}
