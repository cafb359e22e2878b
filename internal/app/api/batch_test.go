package api_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/memory"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect/inspecttest"
)

// landsThenFails is a backend whose batch write reaches the store and then reports
// err, as a durable backend's can when the request's context ends during the sync or
// the store fails while committing (failed then also answers its Err).
type landsThenFails struct {
	*memory.Backend
	err    error
	failed error
}

func (b *landsThenFails) PublishBatch(ctx context.Context, pubs []backend.Publication) error {
	for _, p := range pubs {
		if err := b.Backend.Publish(ctx, p.Envelope, p.Delay); err != nil {
			return err
		}
	}
	return b.err
}

func (b *landsThenFails) Err() error { return b.failed }

// A batch whose write ended with a context error or a failed store may have landed:
// the 503 says so and gives the ids to check, never "none was accepted"; a refusal
// the backend made before writing still says none was.
func TestBatchThatMayHaveLandedGivesItsIDs(t *testing.T) {
	t.Parallel()
	storeFailed := errors.New("storage engine failed: /data: fatal commit error")
	for _, c := range []struct {
		name        string
		err, failed error
		wantMayHave bool
		wantInError string
	}{
		{"deadline", fmt.Errorf("publishing: %w", context.DeadlineExceeded), nil, true, "may have been accepted"},
		{"canceled", context.Canceled, nil, true, "may have been accepted"},
		{"store failed", storeFailed, storeFailed, true, "may have been accepted"},
		{"refused before the write", errors.New("disk under its reserve"), nil, false, "none was accepted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := &landsThenFails{Backend: memory.New(memory.Config{}), err: c.err, failed: c.failed}
			r := newRigOn(t, inspecttest.Options{Backend: b, NoRecords: true}, "")
			status, body := r.call(t, "POST", "/v1/jobs/batch", `{"jobs": [{"queue": "echo", "payload": "a"}, {"queue": "echo", "payload": "b"}]}`)
			msg, _ := body["error"].(string)
			ids, _ := body["ids"].([]any)
			if status != 503 || !strings.Contains(msg, c.wantInError) {
				t.Fatalf("batch: %d %v, want 503 saying %q", status, body, c.wantInError)
			}
			if c.wantMayHave && (len(ids) != 2 || !strings.Contains(msg, "GET /v1/jobs/{id}")) {
				t.Fatalf("batch that may have landed: %v, want its 2 ids and how to check them", body)
			}
			if !c.wantMayHave && len(ids) != 0 {
				t.Fatalf("batch refused before the write: %v, want no id", body)
			}
		})
	}
}
