package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/app/api"
	"github.com/wasmjobs/wasmjobs/internal/app/ui"
)

// postDead posts the dead-letters page's form of action on h.
func postDead(h http.Handler, action string, form url.Values) *httptest.ResponseRecorder {
	return serve(h, formPost("/ui/dead-letters/"+action, form))
}

// TestDashboardReplayKeepsTheHistory: the dashboard's replay of a dead letter is the
// API's, bookkeeping included: the host's memory of jobs knows the job again, pending
// at attempt 1 in its queue, from before it may run.
func TestDashboardReplayKeepsTheHistory(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Config{})
	h, rg := rig(t, b, ui.Config{})
	deadLetters(t, b, 1)
	dead, err := b.DeadLetters(context.Background(), "echo", 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %v %v", dead, err)
	}
	id := dead[0].Envelope.ID
	if w := postDead(h, "replay", url.Values{"queue": {"echo"}, "id": {id}}); w.Code != http.StatusSeeOther {
		t.Fatalf("replay: %d %s", w.Code, w.Body)
	}
	if rec, err := rg.Records.JobRecord(context.Background(), id); err != nil || rec.State != backend.JobPending || rec.Queue != "echo" || rec.Attempt != 1 {
		t.Fatalf("after the dashboard's replay the host's history holds %+v (%v); want the job pending in echo at attempt 1, as the API's replay records it", rec, err)
	}
}

// delayTooLong is a memory backend whose replays hit its own ceiling on delays, as
// RabbitMQ's delay chain may.
type delayTooLong struct{ *memory.Backend }

func (delayTooLong) ReplayDeadLetter(context.Context, string, string) error {
	return fmt.Errorf("the replay's delay passes this backend's 1h: %w", backend.ErrDelayTooLong)
}

// TestDashboardMapsErrorsAsTheAPIDoes: the one error mapping answers the dashboard's
// errors with the API's statuses, backend.ErrDelayTooLong (the client's to fix: 400)
// included.
func TestDashboardMapsErrorsAsTheAPIDoes(t *testing.T) {
	t.Parallel()
	b := delayTooLong{memory.New(memory.Config{})}
	h, rg := rig(t, b, ui.Config{})
	w := postDead(h, "replay", url.Values{"queue": {"echo"}, "id": {"01X"}})
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "1h") {
		t.Errorf("the dashboard's replay past the backend's delay ceiling: %d %s, want 400 naming it", w.Code, w.Body)
	}
	srv := httptest.NewServer(api.New(api.Config{Inspector: rg.Inspector}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/dead-letters/01X/replay?queue=echo", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != w.Code {
		t.Errorf("the API answers the same replay %d, the dashboard %d", resp.StatusCode, w.Code)
	}
}
