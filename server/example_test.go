package server_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/server"
)

// A host embedded in a program: a module that echoes its payload serves the queue
// "echo" on the memory backend; a job goes in through Enqueue and its output comes
// back from the Inspector.
func Example() {
	ctx := context.Background()
	modules, _ := os.MkdirTemp("", "modules")
	defer os.RemoveAll(modules)
	wasm, _ := os.ReadFile("../testdata/abi/echo.wasm")
	os.WriteFile(filepath.Join(modules, "echo.wasm"), wasm, 0o644) // serves the queue "echo"

	srv, err := server.New(memory.New(memory.Config{}), server.Config{Modules: modules})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer srv.Stop(ctx) // drains: running jobs finish, then the backend closes

	res, err := srv.Enqueue(ctx, server.Job{Queue: "echo", Payload: []byte("hello")})
	if err != nil {
		log.Fatal(err)
	}
	job, err := srv.Inspector().Job(ctx, res.IDs[0])
	for err == nil && !job.State.Finished() { // succeeded, dead or cancelled
		time.Sleep(10 * time.Millisecond)
		job, err = srv.Inspector().Job(ctx, res.IDs[0])
	}
	fmt.Println(job.State, string(job.Output), err)
	// Output: succeeded hello <nil>
}
