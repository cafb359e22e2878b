//go:build wasip1

package wasmjobs

// trap executes the unreachable instruction (trap_wasm.s).
func trap()

// Trap fails the job at once with a trap ("trap: unreachable"): the instance is
// discarded and the job retried. Unlike a panic, which the SDK recovers into a retry
// with the panic's message, it ends the instance.
func Trap() { trap() }
