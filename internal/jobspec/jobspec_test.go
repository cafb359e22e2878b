package jobspec_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
	"github.com/wasmjobs/wasmjobs/worker"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := jobspec.Spec{Queue: "q", Payload: []byte("x"), Headers: map[string]string{"k": "v"}, Delay: time.Minute, Priority: 1, MaxAttempts: 3}
	for _, tc := range []struct {
		name       string
		change     func(*jobspec.Spec)
		maxPayload int
		want       string // "" for valid
		tooLarge   bool
	}{
		{"valid", func(*jobspec.Spec) {}, 0, "", false},
		{"no queue", func(s *jobspec.Spec) { s.Queue = "" }, 0, "queue is required", false},
		{"bad queue name", func(s *jobspec.Spec) { s.Queue = "a b" }, 0, `invalid queue name "a b"`, false},
		{"a dead-letter queue", func(s *jobspec.Spec) { s.Queue = "q.dead" }, 0, "the suffix .dead is reserved", false},
		{"payload at the limit", func(s *jobspec.Spec) { s.Payload = make([]byte, 4) }, 4, "", false},
		{"payload over the limit", func(s *jobspec.Spec) { s.Payload = make([]byte, 5) }, 4, "payload of 5 bytes passes queue q's limit of 4 bytes", true},
		{"payload over the default limit", func(s *jobspec.Spec) { s.Payload = make([]byte, jobspec.DefaultMaxPayload+1) }, 0, "limit of 1048576 bytes", true},
		{"the worker's priority header", func(s *jobspec.Spec) { s.Headers = map[string]string{worker.PriorityHeader: "2"} }, 0, `headers: "wasmjobs-priority": the prefix wasmjobs- is reserved`, false},
		{"any reserved header", func(s *jobspec.Spec) { s.Headers = map[string]string{"wasmjobs-x": ""} }, 0, "the prefix wasmjobs- is reserved", false},
		{"empty header key", func(s *jobspec.Spec) { s.Headers = map[string]string{"": "v"} }, 0, "headers: empty key", false},
		{"negative delay", func(s *jobspec.Spec) { s.Delay = -time.Second }, 0, "delay -1s is negative", false},
		{"delay past the maximum", func(s *jobspec.Spec) { s.Delay = backend.MaxDelay + time.Second }, 0, "passes the longest delay accepted", false},
		{"negative priority", func(s *jobspec.Spec) { s.Priority = -1 }, 0, "priority -1: want 0 to 1", false},
		{"the deferred lane", func(s *jobspec.Spec) { s.Priority = worker.DefaultPriorityLevels }, 0, "priority 2: want 0 to 1", false},
		{"negative max attempts", func(s *jobspec.Spec) { s.MaxAttempts = -1 }, 0, "max_attempts -1: want 0 (the queue's) or more", false},
		{"unique key and hold", func(s *jobspec.Spec) { s.UniqueKey, s.UniqueFor = "user-7", time.Hour }, 0, "", false},
		{"unique key, no hold", func(s *jobspec.Spec) { s.UniqueKey = "user-7" }, 0, "", false},
		{"unique_for without a key", func(s *jobspec.Spec) { s.UniqueFor = time.Hour }, 0, "unique_for 1h0m0s without unique_key", false},
		{"negative unique_for", func(s *jobspec.Spec) { s.UniqueKey, s.UniqueFor = "k", -time.Second }, 0, "unique_for -1s is negative", false},
		{"unique_for past the maximum", func(s *jobspec.Spec) { s.UniqueKey, s.UniqueFor = "k", jobspec.MaxUniqueFor+1 }, 0, "passes the longest hold accepted", false},
		{"unique key too long", func(s *jobspec.Spec) { s.UniqueKey = strings.Repeat("k", jobspec.MaxUniqueKey+1) }, 0, "unique_key of 513 bytes passes the limit of 512 bytes", false},
		{"unique key not UTF-8", func(s *jobspec.Spec) { s.UniqueKey = "\xff" }, 0, "is not valid UTF-8", false},
		{"concurrency key", func(s *jobspec.Spec) { s.Key = "account-42" }, 0, "", false},
		{"concurrency key at the limit", func(s *jobspec.Spec) { s.Key = strings.Repeat("k", jobspec.MaxKey) }, 0, "", false},
		{"concurrency key too long", func(s *jobspec.Spec) { s.Key = strings.Repeat("k", jobspec.MaxKey+1) }, 0, "key of 513 bytes passes the limit of 512 bytes", false},
		{"concurrency key not UTF-8", func(s *jobspec.Spec) { s.Key = "a\xffb" }, 0, `key "a\xffb" is not valid UTF-8`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.change(&s)
			err := jobspec.Validate(s, tc.maxPayload)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid job refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, jobspec.ErrInvalid) || errors.Is(err, jobspec.ErrTooLarge) != tc.tooLarge {
				t.Fatalf("error %v, want one containing %q (too large: %v)", err, tc.want, tc.tooLarge)
			}
		})
	}
	env := ok.Envelope()
	if env.ID == "" || env.Queue != "q" || env.Priority != 1 || env.MaxAttempts != 3 || env.Attempt != 1 || env.Headers["k"] != "v" {
		t.Fatalf("envelope %+v", env)
	}
	keyed := ok
	keyed.Key = "account-42"
	if env := keyed.Envelope(); env.Key != "account-42" || env.Queue != "q" {
		t.Fatalf("envelope of a job with a key: %+v, want the key on it", env)
	}
}
