package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/wasmjobs/wasmjobs/backend"
)

// errUniqueUnsupported answers a job with a unique_key on a backend that cannot keep
// keys (RabbitMQ): 501, rather than a uniqueness that would not hold.
var errUniqueUnsupported = &httpError{http.StatusNotImplemented,
	"unique_key is not supported by this backend: RabbitMQ cannot look a job up by key, and the hosts sharing its queues share no lock, " +
		"so two hosts (or one host after a restart) could each queue the job; enqueue without unique_key (and make the handler idempotent), " +
		"or run the hosts on the pebble backend, where uniqueness is exact"}

// enqueueUnique publishes jobs of which at least one has a unique key, through the
// backend's UniquePublisher. A single job (batch false) answers 202 {"id"} when it was
// queued and 200 {"id", "duplicate": true} naming the job that holds its key when it
// was not. A batch answers {"ids", "duplicates"}, one entry per job in order: 202 when
// at least one job was queued, 200 when every one was a duplicate.
func (s *server) enqueueUnique(w http.ResponseWriter, r *http.Request, pubs []backend.UniquePublication, batch bool) {
	up, ok := s.cfg.Backend.(backend.UniquePublisher)
	if !ok {
		fail(w, errUniqueUnsupported)
		return
	}
	for _, p := range pubs {
		s.cfg.History.Enqueued(p.Envelope, p.Delay > 0) // first: see publish
	}
	res, err := up.PublishUnique(r.Context(), pubs)
	// Forget what was not queued: duplicates, and after a failure every job but
	// those a one-by-one backend queued before it.
	for i, p := range pubs {
		if queued := i < len(res) && !res[i].Duplicate && (err == nil || s.partial()); !queued {
			s.cfg.History.Forget(p.Envelope.ID)
		}
	}
	if err != nil {
		s.uniqueFailed(w, pubs, res, err, batch)
		return
	}
	queued := 0
	for _, x := range res {
		if !x.Duplicate {
			queued++
		}
	}
	if queued > 0 && !s.cfg.Accepting() {
		for i, x := range res {
			if !x.Duplicate {
				s.cfg.History.Forget(pubs[i].Envelope.ID)
			}
		}
		writeError(w, http.StatusServiceUnavailable,
			"the host is draining (shutting down): it began while %d jobs were published, which may be dropped at exit; enqueue them again through another host, or after it restarts", queued)
		return
	}
	status := http.StatusAccepted
	if queued == 0 {
		status = http.StatusOK
	}
	if !batch {
		if res[0].Duplicate {
			writeJSON(w, status, map[string]any{"id": res[0].ID, "duplicate": true})
			return
		}
		writeJSON(w, status, map[string]any{"id": res[0].ID})
		return
	}
	ids := make([]string, len(res))
	dups := make([]bool, len(res))
	for i, x := range res {
		ids[i], dups[i] = x.ID, x.Duplicate
	}
	writeJSON(w, status, map[string]any{"ids": ids, "duplicates": dups})
}

// partial reports whether the backend publishes unique jobs one by one (not a
// BatchPublisher): after a failure, the results it returned are jobs that were queued.
func (s *server) partial() bool {
	_, atomic := s.cfg.Backend.(backend.BatchPublisher)
	return !atomic
}

// uniqueFailed answers a PublishUnique that failed.
func (s *server) uniqueFailed(w http.ResponseWriter, pubs []backend.UniquePublication, res []backend.UniqueResult, err error, batch bool) {
	err = fmt.Errorf("publishing %d jobs with unique keys: %w", len(pubs), err)
	if errors.Is(err, backend.ErrUnknownQueue) || errors.Is(err, backend.ErrDelayTooLong) {
		fail(w, err)
		return
	}
	if s.partial() {
		// Published one by one: those before the failure are in.
		ids := make([]string, 0, len(res))
		for _, x := range res {
			ids = append(ids, x.ID)
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "ids": ids})
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || s.storeFailed() {
		ids := make([]string, len(pubs))
		for i, p := range pubs {
			ids[i] = p.Envelope.ID
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": fmt.Sprintf("%v; the jobs may have been accepted (all of them or none): check with GET /v1/jobs/{id} for the ids given", err), "ids": ids})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": fmt.Sprintf("%v: none was accepted", err), "ids": []string{}})
}
