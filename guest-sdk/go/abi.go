package wasmjobs

// The ABI v1 constants this SDK speaks, copied from the host's abi package (the SDK is a
// module of its own, without dependencies); a test of the host checks that they match.
const (
	outcomeAck        int32 = 0
	outcomeRetry      int32 = 1
	outcomeDefer      int32 = 2
	outcomeDeadLetter int32 = 3
	outcomeWait       int32 = 4

	statusNotFound      int32 = -1
	statusBadArgument   int32 = -2
	statusLimitExceeded int32 = -3
	statusNotPermitted  int32 = -4

	metaJobID         int32 = 0
	metaQueue         int32 = 1
	metaModuleName    int32 = 2
	metaModuleVersion int32 = 3
	metaTraceID       int32 = 4
	metaSpanID        int32 = 5

	childID        int32 = 0
	childQueue     int32 = 1
	childState     int32 = 2
	childReason    int32 = 3
	childOutput    int32 = 4
	childTruncated int32 = 5
)
