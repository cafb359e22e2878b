package backoff_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests (a timer's wait that
// a context did not end).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
