//go:build !wasip1

package wasmjobs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func reset(payload string, headers map[string]string) {
	*host = fakeHost{payload: []byte(payload), meta: [6]string{"01J", "mail", "greet", "abc", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"}, headers: headers, attempt: 2, max: 5, delayMs: -1}
}

func TestSettleCodesStageReasonAndDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		code   int32
		reason string
		delay  int64
	}{
		{"nil acks", nil, outcomeAck, "", -1},
		{"retry with delay", Retry("later", 1500*time.Millisecond), outcomeRetry, "later", 1500},
		{"retry without delay", Retry("later", 0), outcomeRetry, "later", -1},
		{"defer", Defer(2*time.Second, "busy"), outcomeDefer, "busy", 2000},
		{"dead letter", DeadLetter("bad"), outcomeDeadLetter, "bad", -1},
		{"a plain error retries", errors.New("boom"), outcomeRetry, "boom", -1},
		{"a wrapped settle keeps its outcome", fmt.Errorf("context: %w", DeadLetter("bad")), outcomeDeadLetter, "bad", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reset("x", nil)
			Handle(func(*Job) error { return tc.err })
			if got := run(); got != tc.code || host.reason != tc.reason || host.delayMs != tc.delay {
				t.Fatalf("code %d reason %q delay %d; want %d %q %d", got, host.reason, host.delayMs, tc.code, tc.reason, tc.delay)
			}
		})
	}
}

func TestPanicIsRecoveredIntoARetry(t *testing.T) {
	reset("x", nil)
	Handle(func(*Job) error { panic("oops") })
	if got := run(); got != outcomeRetry || host.reason != "panic: oops" {
		t.Fatalf("code %d reason %q", got, host.reason)
	}
	handler = nil
	if got := run(); got != outcomeRetry || !strings.Contains(host.reason, "no handler registered") {
		t.Fatalf("without a handler: code %d reason %q", got, host.reason)
	}
}

func TestJobReadsAndStages(t *testing.T) {
	long := strings.Repeat("v", 300)
	reset("héllo", map[string]string{"Trace-Id": long})
	job := &Job{}
	if job.Text() != "héllo" || job.ID() != "01J" || job.Queue() != "mail" || job.Module() != "greet" || job.Version() != "abc" ||
		job.TraceID() != "4bf92f3577b34da6a3ce929d0e0e4736" || job.SpanID() != "00f067aa0ba902b7" || job.Attempt() != 2 || job.MaxAttempts() != 5 {
		t.Fatalf("job reads wrong: %q %q %q", job.Text(), job.ID(), job.Queue())
	}
	if v, ok := job.Header("Trace-Id"); !ok || v != long {
		t.Fatal("a header longer than the first buffer must be read whole")
	}
	if _, ok := job.Header("trace-id"); ok {
		t.Fatal("keys are exact")
	}
	fmt.Fprintf(job, "out %d", 1)
	job.Infof("hi %s", "there")
	if err := job.Enqueue("child", []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	if err := job.Enqueue("", nil, 0); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("empty queue: %v", err)
	}
	if string(host.output) != "out 1" || host.logs[0] != "1 hi there" || host.children[0] != "child:c" {
		t.Fatalf("staged %q %v %v", host.output, host.logs, host.children)
	}
}

func ExampleRetry() {
	reset("x", nil)
	Handle(func(job *Job) error {
		return Retry("the mail server is down", 30*time.Second)
	})
	fmt.Println(run(), host.reason, host.delayMs)
	// Output: 1 the mail server is down 30000
}

func TestFanOutAndFanIn(t *testing.T) {
	reset("x", nil)
	Handle(func(job *Job) error {
		if Round() == 0 && len(Children()) == 0 {
			if err := EnqueueAwaited("render", []byte("p1"), 0); err != nil {
				return err
			}
			if err := EnqueueAwaited("", nil, 0); err != ErrBadArgument {
				t.Errorf("EnqueueAwaited to an empty queue: %v", err)
			}
			return WaitForChildren()
		}
		return nil
	})
	if got := run(); got != outcomeWait || host.reason != "" || strings.Join(host.children, ",") != "render:p1 (awaited)" {
		t.Fatalf("code %d reason %q children %q", got, host.reason, host.children)
	}
	reset("x", nil)
	host.round = 1
	long := strings.Repeat("o", 100) // longer than the first buffer: read again whole
	host.awaited = [][6]string{{"01JA", "render", "succeeded", "", long, "\x00"}, {"01JB", "render", "dead", "no page", "", "\x01"}}
	var got []Child
	Handle(func(job *Job) error {
		if Round() != 1 {
			t.Errorf("Round %d", Round())
		}
		got = Children()
		return nil
	})
	if code := run(); code != outcomeAck {
		t.Fatalf("code %d", code)
	}
	want := []Child{{ID: "01JA", Queue: "render", State: "succeeded", Output: []byte(long)}, {ID: "01JB", Queue: "render", State: "dead", Reason: "no page", Truncated: true}}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("Children = %+v\nwant %+v", got, want)
	}
}
