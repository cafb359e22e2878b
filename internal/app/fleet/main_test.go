package fleet

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: a closed follower
// leaves nothing behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
