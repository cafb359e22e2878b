package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/jobspec"
)

// MaxBatch is the most jobs one EnqueueBatch takes.
const MaxBatch = 1000

// errUniqueUnsupported answers a job with a unique key on a backend that cannot keep
// keys (RabbitMQ), rather than a uniqueness that would not hold.
var errUniqueUnsupported = errorf(ErrUnavailable,
	"unique_key is not supported by this backend: RabbitMQ cannot look a job up by key, and the hosts sharing its queues share no lock, "+
		"so two hosts (or one host after a restart) could each queue the job; enqueue without unique_key (and make the handler idempotent), "+
		"or run the hosts on the pebble backend, where uniqueness is exact")

// Enqueued is what became of an enqueue: the jobs' ids, in order, and, when a job held
// a unique key, which ones were duplicates (nothing queued; the id is then that of the
// job holding the key). Duplicates is nil when no job held a key.
type Enqueued struct {
	IDs        []string
	Duplicates []bool
}

// Queued counts the jobs queued (not duplicates).
func (e Enqueued) Queued() int {
	n := 0
	for i := range e.IDs {
		if e.Duplicates == nil || !e.Duplicates[i] {
			n++
		}
	}
	return n
}

// Enqueue applies the enqueue rules to one job and publishes it: the queue must be
// served by a module, whose limits (the payload's size) come from the registry; the
// job passes jobspec.Validate; a job with a unique key goes through the backend's
// backend.UniquePublisher (ErrUnavailable where there is none). The host's memory
// (Config.Records) knows the job from before its publish, since on a fast backend it
// can run and settle before Publish returns.
//
// While the host takes no jobs (not started yet; draining, on a backend that keeps
// nothing queued; closing), Config.Refusal has an error (as the server sets it) and Enqueue refuses the job with it, publishing nothing; with
// Refusal nil it takes a job as soon as the registry serves the job's queue, and a
// queue no module serves yet (the registry has not read its directory) is refused
// with backend.ErrUnknownQueue. A job whose publish the drain overtook (a Refusal
// came meanwhile) is reported as refused with ErrDraining: it may be dropped
// at exit. Other errors: ErrInvalid and ErrTooLarge (the job's checks), the backend's
// (wrapped), and a PartialError for a unique job that may or may not be queued.
func (in *Inspector) Enqueue(ctx context.Context, spec jobspec.Spec) (Enqueued, error) {
	if err := in.Refusal(); err != nil {
		return Enqueued{}, err
	}
	pub, err := in.check(spec)
	if err != nil {
		return Enqueued{}, err
	}
	span := in.startSend(ctx, &pub.Envelope)
	if pub.Key != "" {
		res, err := in.enqueueUnique(ctx, []backend.UniquePublication{pub}, false)
		endSpan(span, err)
		return res, err
	}
	err = in.publish(ctx, pub.Envelope, pub.Delay)
	endSpan(span, err)
	if err != nil {
		return Enqueued{}, err
	}
	return Enqueued{IDs: []string{pub.Envelope.ID}}, nil
}

// EnqueueBatch is Enqueue for 1 to MaxBatch jobs, each checked before any is
// published (an error names the job, "jobs[i]: "). On a backend.BatchPublisher the
// batch is one atomic write, all or none; elsewhere the jobs are published one by one
// and a failure is a PartialError with the ids published before it. Jobs with unique
// keys are judged each on its own.
func (in *Inspector) EnqueueBatch(ctx context.Context, specs []jobspec.Spec) (Enqueued, error) {
	if err := in.Refusal(); err != nil {
		return Enqueued{}, err
	}
	if len(specs) == 0 || len(specs) > MaxBatch {
		return Enqueued{}, errorf(ErrInvalid, "jobs: want 1 to %d jobs, got %d", MaxBatch, len(specs))
	}
	pubs := make([]backend.UniquePublication, len(specs))
	unique := false
	for i, spec := range specs {
		var err error
		if pubs[i], err = in.check(spec); err != nil {
			return Enqueued{}, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		unique = unique || pubs[i].Key != ""
	}
	envs := make([]*backend.Envelope, len(pubs))
	for i := range pubs {
		envs[i] = &pubs[i].Envelope
	}
	span := in.startSend(ctx, envs...)
	res, err := in.enqueueBatch(ctx, pubs, unique)
	endSpan(span, err)
	return res, err
}

// enqueueBatch publishes the checked jobs of EnqueueBatch.
func (in *Inspector) enqueueBatch(ctx context.Context, pubs []backend.UniquePublication, unique bool) (Enqueued, error) {
	if unique {
		return in.enqueueUnique(ctx, pubs, true)
	}
	if in.batch != nil {
		return in.publishBatch(ctx, pubs)
	}
	ids := make([]string, 0, len(pubs))
	for _, p := range pubs {
		if err := in.publish(ctx, p.Envelope, p.Delay); err != nil {
			// ids holds the jobs accepted before the failure (or the drain).
			return Enqueued{}, &PartialError{IDs: ids, Err: err}
		}
		ids = append(ids, p.Envelope.ID)
	}
	return Enqueued{IDs: ids}, nil
}

// check applies the rules to one job and makes its publication.
func (in *Inspector) check(spec jobspec.Spec) (backend.UniquePublication, error) {
	limit := 0
	if spec.Queue != "" {
		mod, err := in.Served(spec.Queue)
		if err != nil {
			return backend.UniquePublication{}, err
		}
		limit = in.payloadLimit(mod.Name)
	}
	if err := jobspec.Validate(spec, limit); err != nil {
		return backend.UniquePublication{}, err
	}
	return spec.Publication(), nil
}

func (in *Inspector) payloadLimit(module string) int {
	if h := in.cfg.Registry.Handler(module); h != nil {
		return h.Module().Manifest().Limits.MaxPayload
	}
	return host.DefaultLimits().MaxPayload
}

// drainedDuring is the refusal of jobs whose publish the drain overtook: what names
// them ("job X was"), it is "it" or "them".
func drainedDuring(what, it string) error {
	return errorf(ErrDraining, "the host is draining (shutting down): it began while %s published, which may be dropped at exit; enqueue %s again through another host, or after it restarts", what, it)
}

func (in *Inspector) publish(ctx context.Context, env backend.Envelope, delay time.Duration) error {
	// Known first: on a fast backend the job can run and settle before Publish
	// returns, and its later states must not be overwritten by "pending".
	in.mem.Enqueued(env, delay > 0)
	if err := in.cfg.Backend.Publish(ctx, env, delay); err != nil {
		in.mem.Forget(env.ID)
		return fmt.Errorf("publishing to queue %s: %w", env.Queue, err)
	}
	// Accepted means the job was in before the drain began. One whose publish the first
	// signal overtook may be dropped at exit: the caller must not count on it.
	if in.Refusal() != nil {
		// The caller is told the job was refused: the memory must not show it as
		// pending. If it runs all the same, its events record it again.
		in.mem.Forget(env.ID)
		return drainedDuring("job "+env.ID+" was", "it")
	}
	return nil
}

// publishBatch publishes a batch in one atomic write: every job is accepted, or none.
func (in *Inspector) publishBatch(ctx context.Context, pubs []backend.UniquePublication) (Enqueued, error) {
	plain := make([]backend.Publication, len(pubs))
	ids := make([]string, len(pubs))
	for i, p := range pubs {
		plain[i], ids[i] = p.Publication, p.Envelope.ID
		in.mem.Enqueued(p.Envelope, p.Delay > 0) // first: see publish
	}
	if raw := in.batch.PublishBatch(ctx, plain); raw != nil {
		for _, id := range ids {
			in.mem.Forget(id)
		}
		err := fmt.Errorf("publishing a batch of %d jobs: %w", len(pubs), raw)
		if errors.Is(err, backend.ErrUnknownQueue) || errors.Is(err, backend.ErrDelayTooLong) {
			return Enqueued{}, err
		}
		// The batch is one write: whole or not at all. But a write that ended with the
		// caller's context, or with a store that failed while committing it, may have
		// landed: the caller gets the ids to look up rather than a "none" that may lie.
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || in.StoreFailed() {
			return Enqueued{}, &PartialError{IDs: ids, Err: fmt.Errorf("%w; the batch may have been accepted (all of it or none): check with GET /v1/jobs/{id} for the ids given", err)}
		}
		return Enqueued{}, &PartialError{IDs: []string{}, Err: fmt.Errorf("publishing a batch of %d jobs: none was accepted: %w", len(pubs), raw)}
	}
	if in.Refusal() != nil {
		return Enqueued{}, &PartialError{IDs: []string{}, Err: drainedDuring(fmt.Sprintf("a batch of %d jobs was", len(pubs)), "them")}
	}
	return Enqueued{IDs: ids}, nil
}

// enqueueUnique publishes jobs of which at least one has a unique key, through the
// backend's UniquePublisher.
func (in *Inspector) enqueueUnique(ctx context.Context, pubs []backend.UniquePublication, batch bool) (Enqueued, error) {
	if in.unique == nil {
		return Enqueued{}, errUniqueUnsupported
	}
	for _, p := range pubs {
		in.mem.Enqueued(p.Envelope, p.Delay > 0) // first: see publish
	}
	res, err := in.unique.PublishUnique(ctx, pubs)
	// Forget what was not queued: duplicates, and after a failure every job but
	// those a one-by-one backend queued before it.
	for i, p := range pubs {
		if queued := i < len(res) && !res[i].Duplicate && (err == nil || in.batch == nil); !queued {
			in.mem.Forget(p.Envelope.ID)
		}
	}
	if err != nil {
		return Enqueued{}, in.uniqueFailed(pubs, res, err)
	}
	out := Enqueued{IDs: make([]string, len(res)), Duplicates: make([]bool, len(res))}
	for i, x := range res {
		out.IDs[i], out.Duplicates[i] = x.ID, x.Duplicate
	}
	if queued := out.Queued(); queued > 0 && in.Refusal() != nil {
		for i, x := range res {
			if !x.Duplicate {
				in.mem.Forget(pubs[i].Envelope.ID)
			}
		}
		return Enqueued{}, drainedDuring(fmt.Sprintf("%d jobs were", queued), "them")
	}
	return out, nil
}

// uniqueFailed is the error of a PublishUnique that failed.
func (in *Inspector) uniqueFailed(pubs []backend.UniquePublication, res []backend.UniqueResult, err error) error {
	err = fmt.Errorf("publishing %d jobs with unique keys: %w", len(pubs), err)
	if errors.Is(err, backend.ErrUnknownQueue) || errors.Is(err, backend.ErrDelayTooLong) {
		return err
	}
	if in.batch == nil {
		// Published one by one: those before the failure are in.
		ids := make([]string, 0, len(res))
		for _, x := range res {
			ids = append(ids, x.ID)
		}
		return &PartialError{IDs: ids, Err: err}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || in.StoreFailed() {
		ids := make([]string, len(pubs))
		for i, p := range pubs {
			ids[i] = p.Envelope.ID
		}
		return &PartialError{IDs: ids, Err: fmt.Errorf("%w; the jobs may have been accepted (all of them or none): check with GET /v1/jobs/{id} for the ids given", err)}
	}
	return &PartialError{IDs: []string{}, Err: fmt.Errorf("%w: none was accepted", err)}
}
