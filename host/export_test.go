package host

// JSInterrupts reports how many JS runs of m QuickJS's interrupt handler stopped.
func JSInterrupts(m *Module) int64 { return m.jsInterrupts.Load() }
