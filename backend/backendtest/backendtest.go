// Package backendtest is the contract suite that every backend.Backend passes.
//
// A backend's own tests call Run with a constructor; each rule of the contract is a
// named subtest, so a failure names the rule that broke:
//
//	func TestContract(t *testing.T) {
//		backendtest.Run(t, backendtest.Options{
//			New:      func(t *testing.T) backend.Backend { return memory.New(memory.Config{}) },
//			Synctest: true,
//		})
//	}
//
// A rule that needs a capability a backend may lack (backend.Capabilities: priority
// ordering, and with it defer-to-the-front; a bound per concurrency key) runs only on backends that declare it, and
// is skipped, saying so, on the others.
//
// The suite also requires backend.DeadLetterStore and backend.StatsReader, which every
// backend of the project implements. The rules of the other optional interfaces
// (backend.BatchPublisher, backend.AtomicDelivery, backend.JobRecordReader,
// backend.CancellableDelivery, backend.JobController, backend.JobLister,
// backend.JobEnvelopeReader, backend.UniquePublisher, backend.ScheduleStore, and those
// of jobs that wait for other jobs: backend.DependentPublisher, backend.WaitingDelivery,
// backend.AwaitedDelivery, backend.WaitCanceller, backend.GroupStore) run only
// on backends that implement them and are skipped, saying so, on the others. backend.SchedulePruner has no rules
// here: only RabbitMQ's leadership lease implements it, and its own tests check it.
//
// The rules are grouped by area, one file each, in the manner of River's
// riverdrivertest: the stream and its deliveries (delays too), dead letters, batches
// and atomic settles, job records and control, unique keys, concurrency keys,
// schedules' ticks, jobs that wait for other jobs.
//
// Nothing here proves with a sleep that something did not happen. In a synctest bubble
// the suite waits out its quiet periods in virtual time. On a real broker it uses
// positive signals: a marker published after the fact and received next proves that
// nothing was deliverable before it, and the queue's stats prove what the backend holds
// back under a full prefetch.
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Options configures a run of the suite.
type Options struct {
	// New returns a fresh backend for one subtest. The suite closes it at the end of the
	// subtest. Queue names are unique per subtest, so backends may share a broker.
	New func(t *testing.T) backend.Backend
	// Synctest runs every subtest inside a testing/synctest bubble, in virtual time:
	// for backends whose timers come from the time package.
	Synctest bool
	// Quiet is how long, in virtual time, the suite waits in a synctest bubble to be
	// sure that nothing more arrives. Zero means 300 ms. Without Synctest the suite
	// uses markers and queue stats instead (see the package comment).
	Quiet time.Duration
	// Timeout bounds every wait for a delivery. Zero means 15 s.
	Timeout time.Duration
	// Parallel runs the subtests in parallel.
	Parallel bool
}

// rule is one rule of the contract.
type rule struct {
	name string
	fn   func(t *testing.T, h *harness)
}

// needs names the rules that need a capability: they run only on backends that declare
// it (backend.CapabilitiesOf) and are skipped, saying so, on the others.
var needs = map[string]backend.Capabilities{
	"PriorityHighestFirstFIFOAmongEquals": backend.CapPriority,
	"DeferredAheadOfBacklogDelayedBehind": backend.CapPriority,
	"KeyBoundsRunningInPublishOrder":      backend.CapKeyConcurrency,
	"KeyHeldWhileRetryingDeferredDelayed": backend.CapKeyConcurrency,
	"KeyConcurrencyTwoAtOnce":             backend.CapKeyConcurrency,
	"KeyLimitSetByTheLatestDeclare":       backend.CapKeyConcurrency,
	"KeyFreedByCancelAndDelete":           backend.CapKeyConcurrency,
	"KeysUnderConcurrencyInOrder":         backend.CapKeyConcurrency,
	"WaitingHoldsNoKeyPlace":              backend.CapKeyConcurrency,
}

// rules is the whole contract, area by area; each area's rules live together.
var rules = []rule{
	// The stream and its deliveries: declaring, the round trip, prefetch, priority,
	// Drop, settles, Close and concurrency.
	{"DeclareIsIdempotent", testDeclareIsIdempotent},
	{"RoundTripIsExact", testRoundTripIsExact},
	{"Prefetch1BoundsUnsettled", func(t *testing.T, h *harness) { testPrefetch(t, h, 1) }},
	{"Prefetch8BoundsUnsettled", func(t *testing.T, h *harness) { testPrefetch(t, h, 8) }},
	{"PriorityHighestFirstFIFOAmongEquals", testPriority},
	{"DropLosesNothing", testDropLosesNothing},
	{"SettleTwiceFailsAndChangesNothing", testSettleTwice},
	{"SettlePublishesFirstThenAcks", testSettlePublishesFirst},
	{"CloseEndsStreamsAndRefusesWork", testClose},
	{"ConcurrentNoLossNoDuplicates", testConcurrent},
	// Delays and defers.
	{"DelaysNeverFireEarly", testDelaysNeverFireEarly},
	{"ShortDelayNotHeldBehindLong", testShortDelayNotHeldBehindLong},
	{"DeferredAheadOfBacklogDelayedBehind", testDeferredAheadDelayedBehind},
	{"DelayedPublishToUnknownQueueFails", testUnknownQueue},
	// Dead letters (backend.DeadLetterStore, which the suite requires).
	{"DeadLettersInspectReplayPurge", testDeadLetters},
	// Batches, atomic settles and repeat publishes (backend.BatchPublisher,
	// backend.AtomicDelivery; skipped on a backend without them).
	{"BatchPublishAllOrNothing", testBatchPublish},
	{"AckWithChildrenIsAtomic", testAckWithChildren},
	{"RepeatPublishOfAHeldIDIsDropped", testRepeatPublishDropped},
	// Job records, control, cancelling and listing (backend.JobRecordReader,
	// backend.JobController, backend.CancellableDelivery, backend.JobLister; skipped
	// on a backend without them).
	{"SettlesWithRecordWriteTheRecord", testSettleRecords},
	{"JobRecordsFollowPublishAndSettle", testJobRecords},
	{"JobControlCancelRetryDelete", testJobControl},
	{"CancelledDeliveryLeavesForGood", testCancelRunning},
	{"ListJobsNewestFirstWithCursor", testListJobs},
	// Unique keys (backend.UniquePublisher; skipped on a backend without it).
	{"UniqueKeyHeldWhileAliveAndFor", testUniqueStates},
	{"UniqueKeysPerJobOfABatch", testUniqueBatch},
	{"UniqueUnderConcurrency", testUniqueConcurrent},
	{"UniqueKeyEndsOnCancelOrDelete", testUniqueControl},
	// Concurrency keys (backend.CapKeyConcurrency; the last rule checks that a backend
	// without it refuses a bound per key).
	{"KeyBoundsRunningInPublishOrder", testKeyBoundsRunningInPublishOrder},
	{"KeyHeldWhileRetryingDeferredDelayed", testKeyHeldWhileWaiting},
	{"KeyConcurrencyTwoAtOnce", testKeyLimitN},
	{"KeyLimitSetByTheLatestDeclare", testKeyLimitChangesWithDeclare},
	{"KeyFreedByCancelAndDelete", testKeyFreedByJobControl},
	{"KeysUnderConcurrencyInOrder", testKeysUnderConcurrency},
	{"KeyConcurrencyRefusedWithoutTheCapability", testKeyConcurrencyRefusedWithout},
	// The schedules' last fired ticks (backend.ScheduleStore; skipped on a backend
	// without it).
	{"ScheduleTickPublishesAndRecordsTheLast", testScheduleTicks},
	{"ScheduleTickOfAHeldIDRecordsOnly", testScheduleTickRepeat},
	{"ScheduleTickThatFailsRecordsNothing", testScheduleTickFails},
	{"ScheduleStoreRefusesAfterClose", testScheduleClosed},
	// Jobs that wait for other jobs (backend.DependentPublisher,
	// backend.WaitingDelivery, backend.AwaitedDelivery, backend.WaitCanceller,
	// backend.GroupStore; skipped on a backend without them).
	{"DependentsWaitForEveryAwaited", testDependentsWaitForEveryAwaited},
	{"DependentsOnFailureCancelOrRun", testDependentsOnFailure},
	{"UnknownAwaitStoresNothing", testUnknownAwait},
	{"WaitWithResumesAtTheSameAttempt", testWaitWith},
	{"WaitTimeoutRunsWithUnfinished", testWaitTimeout},
	{"CancelWaitingWithAndWithoutCascade", testCancelWaiting},
	{"GroupsWorkflowAndBatch", testGroupsWorkflowAndBatch},
	{"GroupsCancelAndList", testGroupsCancelAndList},
	{"DependentsUnderConcurrency", testDependentsUnderConcurrency},
	{"WaitingHoldsNoKeyPlace", testWaitingHoldsNoKeyPlace},
}

// Run runs every rule of the contract as a subtest of t.
func Run(t *testing.T, o Options) {
	if o.New == nil {
		t.Fatal("backendtest.Run: Options.New is nil")
	}
	if o.Quiet == 0 {
		o.Quiet = 300 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Second
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			if o.Parallel {
				t.Parallel()
			}
			body := func(t *testing.T) {
				b := o.New(t)
				if missing := needs[r.name] &^ backend.CapabilitiesOf(b); missing != 0 {
					ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
					defer cancel()
					if err := b.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
					t.Skipf("%T does not declare the capability %v (backend.CapabilityReporter)", b, missing)
				}
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
					defer cancel()
					if err := b.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
				}()
				r.fn(t, &harness{b: b, o: o, prefix: "bt-" + r.name + "-" + randomHex()})
			}
			if o.Synctest {
				synctest.Test(t, body)
			} else {
				body(t)
			}
		})
	}
}

func randomHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// implements returns h's backend as the optional interface I, or skips the rule,
// saying so, on a backend that does not implement it.
func implements[I any](t *testing.T, h *harness) I {
	t.Helper()
	i, ok := h.b.(I)
	if !ok {
		t.Skipf("%T does not implement %v", h.b, reflect.TypeFor[I]())
	}
	return i
}
