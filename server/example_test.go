package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/server"
)

// A host embedded in a program: a module that echoes its payload serves the queue
// "echo" on the memory backend; a job goes in through the API and its output comes
// back from it.
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
	api := httptest.NewServer(srv.Handler())
	defer api.Close()

	var job struct{ ID, State, Output string }
	read := func(resp *http.Response, err error) {
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&job)
	}
	read(http.Post(api.URL+"/v1/jobs", "application/json", strings.NewReader(`{"queue": "echo", "payload": "hello"}`)))
	for job.State != "succeeded" {
		time.Sleep(10 * time.Millisecond)
		read(http.Get(api.URL + "/v1/jobs/" + job.ID))
	}
	fmt.Println(job.State, job.Output)
	// Output: succeeded hello
}
