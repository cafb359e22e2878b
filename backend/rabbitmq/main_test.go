package rabbitmq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a backend that is
// closed, a stream that is dropped and a call whose context ended leave nothing behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
