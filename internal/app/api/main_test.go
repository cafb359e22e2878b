package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives its tests: the registry's, the
// worker's, the test servers' connections.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
