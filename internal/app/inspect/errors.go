package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// The Inspector's errors, besides the backend's (backend.ErrNotFound and the others)
// and the registry's (host.ErrUnknownModule, host.ErrUnknownVersion), which it passes
// on wrapped. HTTPError maps each to its status.
var (
	// ErrInvalid is a request the caller must fix (400): the same error as
	// jobspec.ErrInvalid, so that a job's own checks are of the kind too.
	ErrInvalid = jobspec.ErrInvalid
	// ErrTooLarge is a payload past its queue's limit, or a body past the API's (413).
	ErrTooLarge = jobspec.ErrTooLarge
	// ErrUnavailable is what the backend cannot do (list, cancel or delete a job on
	// RabbitMQ; a unique key where no key holds): the error says why (501).
	ErrUnavailable = errors.New("not available on this backend")
	// ErrDraining is an enqueue, retry or replay while the host takes no new jobs
	// (Config.Refusal has an error): the host is draining, or not started (503).
	ErrDraining = errors.New("the host is draining (shutting down) and takes no new jobs: enqueue through another host, or after it restarts")
	// ErrConflict is an action the state of what it acts on refuses, such as a
	// promote without a canary, or a backup whose name is taken (409).
	ErrConflict = errors.New("conflict")
)

// kindError is an error with a message of its own that is of the kinds it unwraps to.
type kindError struct {
	msg   string
	kinds []error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return e.kinds }

// Errorf returns an error of kind (errors.Is(err, kind)) whose message is the format's
// alone.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kinds: []error{kind}}
}

var errorf = Errorf

// asConflict makes a registry error that is not of a known kind an ErrConflict, with
// its message as it is: a version that cannot be served, no canary to promote.
func asConflict(err error) error {
	switch {
	case err == nil, errors.Is(err, host.ErrUnknownModule), errors.Is(err, host.ErrUnknownVersion),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	}
	return &kindError{msg: err.Error(), kinds: []error{ErrConflict, err}}
}

// PartialError is a publish of several jobs that failed or was overtaken by the
// drain, or of a unique one that failed, with the ids the caller should know of: those accepted
// before the failure, or, where the write may have landed whole, every id to look up.
// IDs is empty (not nil) where none was accepted.
type PartialError struct {
	IDs []string
	Err error
}

// Error is the wrapped error's message.
func (e *PartialError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PartialError) Unwrap() error { return e.Err }

// HTTPError is the one mapping of the Inspector's and the backend's errors to an HTTP
// status and message, for the API and the dashboard alike: what the client must fix is
// 4xx (a bad request 400, an unknown queue, job, module or version 404, a state that
// refuses the action 409, a payload too large 413, a delay past the backend's own
// ceiling 400), what the backend cannot do is 501, and everything else, the host's
// trouble (a draining host, a full disk, a failed store, a call that gave up waiting),
// is 503: the client may try again later. A PartialError is 503 whatever it wraps.
func HTTPError(err error) (status int, msg string) {
	var pe *PartialError
	switch {
	case errors.As(err, &pe):
		status = http.StatusServiceUnavailable
	case errors.Is(err, ErrTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, backend.ErrUnknownQueue), errors.Is(err, backend.ErrNotFound),
		errors.Is(err, host.ErrUnknownModule), errors.Is(err, host.ErrUnknownVersion):
		status = http.StatusNotFound
	case errors.Is(err, backend.ErrJobState), errors.Is(err, ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, ErrUnavailable):
		status = http.StatusNotImplemented
	case errors.Is(err, backend.ErrDelayTooLong):
		// The backend's own ceiling (RabbitMQ's delay chain is shorter than
		// backend.MaxDelay, which the job's checks apply already): the client's to fix.
		status = http.StatusBadRequest
	default:
		// A full disk (pebble.ErrDiskFull) and a failed store (pebble.ErrStoreFailed)
		// name the data directory in their message.
		status = http.StatusServiceUnavailable
	}
	return status, err.Error()
}

func joinComma(s []string) string { return strings.Join(s, ", ") }
