package schedule_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests (a scheduler whose Run
// did not end with its context).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
