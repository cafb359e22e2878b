// Command greet-go is an example wasmjobs handler in Go. A job's payload is JSON
// {"name": "Ada", "lang": "en"}; the handler writes a greeting to the job's output,
// logs what it did, and, when asked to ({"notify": true}), enqueues a child job on the
// "notify" queue. A payload that is not such JSON, or has no name, is dead-lettered:
// retrying cannot fix it. An unknown language is retried, as if a lookup service were
// down. The greeting is a text/template executed into the job's output: templates find
// methods by reflection, so the linker keeps every method of the types they are given
// (the SDK keeps fan-in's functions off Job, so this handler still imports none of
// them and loads on every backend).
package main

import (
	"encoding/json"
	"fmt"
	"text/template"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
)

type request struct {
	Name   string `json:"name"`
	Lang   string `json:"lang"`
	Notify bool   `json:"notify"`
}

var greetings = map[string]string{"en": "Hello", "fr": "Bonjour", "de": "Hallo", "es": "Hola", "": "Hello"}

var greeting = template.Must(template.New("greeting").Parse("{{.Word}}, {{.Name}}!"))

func greet(job *wasmjobs.Job) error {
	var req request
	if err := json.Unmarshal(job.Payload(), &req); err != nil {
		return wasmjobs.DeadLetter("payload is not a JSON object: " + err.Error())
	}
	if req.Name == "" {
		return wasmjobs.DeadLetter(`payload has no "name"`)
	}
	word, ok := greetings[req.Lang]
	if !ok {
		return wasmjobs.Retry(fmt.Sprintf("no greeting for language %q yet", req.Lang), 2*time.Second)
	}
	if err := greeting.Execute(job, struct{ Word, Name string }{word, req.Name}); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	job.Infof("greeted %s in %q (attempt %d)", req.Name, req.Lang, job.Attempt())
	if req.Notify {
		if err := job.Enqueue("notify", []byte(req.Name), 0); err != nil {
			return fmt.Errorf("enqueue notify: %w", err)
		}
	}
	return nil
}

func init() { wasmjobs.Handle(greet) }

func main() {}
