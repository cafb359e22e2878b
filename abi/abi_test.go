package abi_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/wasmjobs/wasmjobs/abi"
)

// TestGoSDKConstantsMatch checks the constants that the Go guest SDK, a module without
// dependencies, copies from this package.
func TestGoSDKConstantsMatch(t *testing.T) {
	t.Parallel()
	want := map[string]int32{
		"outcomeAck": abi.OutcomeAck, "outcomeRetry": abi.OutcomeRetry, "outcomeDefer": abi.OutcomeDefer,
		"outcomeDeadLetter": abi.OutcomeDeadLetter, "statusNotFound": abi.StatusNotFound,
		"statusBadArgument": abi.StatusBadArgument, "statusLimitExceeded": abi.StatusLimitExceeded,
		"statusNotPermitted": abi.StatusNotPermitted, "metaJobID": abi.MetaJobID, "metaQueue": abi.MetaQueue,
		"metaModuleName": abi.MetaModuleName, "metaModuleVersion": abi.MetaModuleVersion,
		"metaTraceID": abi.MetaTraceID, "metaSpanID": abi.MetaSpanID,
		"outcomeWait": abi.OutcomeWait, "childID": abi.ChildID, "childQueue": abi.ChildQueue, "childState": abi.ChildState,
		"childReason": abi.ChildReason, "childOutput": abi.ChildOutput, "childTruncated": abi.ChildTruncated,
	}
	checkCopies(t, "../guest-sdk/go/abi.go", `(?m)^\s*(\w+)\s+int32\s*=\s*(-?\d+)`, "the SDK", want)
}

// TestGoSDKHTTPStatusesMatch checks the HTTP failure statuses that the Go guest SDK's
// wjhttp package copies from this package.
func TestGoSDKHTTPStatusesMatch(t *testing.T) {
	t.Parallel()
	want := map[string]int32{
		"StatusDenied": abi.StatusHTTPDenied, "StatusBlocked": abi.StatusHTTPBlocked, "StatusDNS": abi.StatusHTTPDNS,
		"StatusRefused": abi.StatusHTTPRefused, "StatusTLS": abi.StatusHTTPTLS, "StatusTimeout": abi.StatusHTTPTimeout,
		"StatusTooLarge": abi.StatusHTTPTooLarge, "StatusTooManyRequests": abi.StatusHTTPTooManyRequests,
		"StatusRateLimited": abi.StatusHTTPRateLimited, "StatusCircuitOpen": abi.StatusHTTPCircuitOpen,
		"StatusConnection": abi.StatusHTTPConnection, "StatusTooManyRedirects": abi.StatusHTTPTooManyRedirects,
	}
	checkCopies(t, "../guest-sdk/go/wjhttp/errors.go", `(?m)^\s*(Status\w+)\s+int32\s*=\s*(-?\d+)`, "wjhttp", want)
}

// checkCopies checks the constants that file defines, the lines re matches (a name and
// its value), against want: each one known and equal, and every one of want found. who
// names the copy in the failures.
func checkCopies(t *testing.T, file, re, who string, want map[string]int32) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(src), -1) {
		w, ok := want[m[1]]
		if !ok {
			t.Errorf("%s defines %s, which this test does not know", who, m[1])
			continue
		}
		found++
		if got, _ := strconv.Atoi(m[2]); int32(got) != w {
			t.Errorf("%s %s = %d, abi says %d", who, m[1], got, w)
		}
	}
	if found != len(want) {
		t.Errorf("found %d of the %d constants in %s", found, len(want), who)
	}
}
