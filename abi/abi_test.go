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
	src, err := os.ReadFile("../guest-sdk/go/abi.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{
		"outcomeAck": abi.OutcomeAck, "outcomeRetry": abi.OutcomeRetry, "outcomeDefer": abi.OutcomeDefer,
		"outcomeDeadLetter": abi.OutcomeDeadLetter, "statusNotFound": abi.StatusNotFound,
		"statusBadArgument": abi.StatusBadArgument, "statusLimitExceeded": abi.StatusLimitExceeded,
		"statusNotPermitted": abi.StatusNotPermitted, "metaJobID": abi.MetaJobID, "metaQueue": abi.MetaQueue,
		"metaModuleName": abi.MetaModuleName, "metaModuleVersion": abi.MetaModuleVersion,
	}
	found := 0
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s+int32\s*=\s*(-?\d+)`).FindAllStringSubmatch(string(src), -1) {
		w, ok := want[m[1]]
		if !ok {
			t.Errorf("the SDK defines %s, which this test does not know", m[1])
			continue
		}
		found++
		if got, _ := strconv.Atoi(m[2]); int32(got) != w {
			t.Errorf("SDK %s = %d, abi says %d", m[1], got, w)
		}
	}
	if found != len(want) {
		t.Errorf("found %d of the %d constants in the SDK", found, len(want))
	}
}

// TestGoSDKHTTPStatusesMatch checks the HTTP failure statuses that the Go guest SDK's
// wjhttp package copies from this package.
func TestGoSDKHTTPStatusesMatch(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../guest-sdk/go/wjhttp/errors.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{
		"StatusDenied": abi.StatusHTTPDenied, "StatusBlocked": abi.StatusHTTPBlocked, "StatusDNS": abi.StatusHTTPDNS,
		"StatusRefused": abi.StatusHTTPRefused, "StatusTLS": abi.StatusHTTPTLS, "StatusTimeout": abi.StatusHTTPTimeout,
		"StatusTooLarge": abi.StatusHTTPTooLarge, "StatusTooManyRequests": abi.StatusHTTPTooManyRequests,
		"StatusRateLimited": abi.StatusHTTPRateLimited, "StatusCircuitOpen": abi.StatusHTTPCircuitOpen,
		"StatusConnection": abi.StatusHTTPConnection, "StatusTooManyRedirects": abi.StatusHTTPTooManyRedirects,
	}
	found := 0
	for _, m := range regexp.MustCompile(`(?m)^\s*(Status\w+)\s+int32\s*=\s*(-?\d+)`).FindAllStringSubmatch(string(src), -1) {
		w, ok := want[m[1]]
		if !ok {
			t.Errorf("wjhttp defines %s, which this test does not know", m[1])
			continue
		}
		found++
		if got, _ := strconv.Atoi(m[2]); int32(got) != w {
			t.Errorf("wjhttp %s = %d, abi says %d", m[1], got, w)
		}
	}
	if found != len(want) {
		t.Errorf("found %d of the %d statuses in wjhttp", found, len(want))
	}
}
