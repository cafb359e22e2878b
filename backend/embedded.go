package backend

import "time"

// What an embedded backend (one that keeps its jobs in this process or in a directory
// of its own, as the memory and pebble backends do) tells the host that runs it. Each
// interface is optional: a host asks for it with a type assertion and, where a backend
// lacks it, does what suits a broker that keeps its jobs elsewhere (RabbitMQ).

// DirReporter is implemented by backends that keep their data in a directory they own.
// The host keeps its own durable state (the modules' last versions and pins) beside it
// and names it in its log and on the dashboard.
type DirReporter interface {
	// Dir is the data directory, as the backend was opened on it.
	Dir() string
}

// QueueKeeper is implemented by embedded backends, which know whether the jobs queued
// in them outlive Close. A backend that keeps nothing takes jobs only until the host's
// drain starts (a job accepted then would be lost at exit); one that keeps them takes
// jobs for as long as the host's API answers, for the next start.
type QueueKeeper interface {
	// KeepsQueued reports whether the jobs queued, delayed and dead-lettered at Close
	// are there again when the backend is next opened.
	KeepsQueued() bool
}

// HealthReporter is implemented by backends whose store can break for good (a failed
// write of the pebble log): the host polls Err and, once it reports a failure, stops
// calling itself ready or healthy, drains and stops with that error.
type HealthReporter interface {
	// Err is nil while the store works, and the failure, for good, once it broke.
	Err() error
}

// RecoveryReporter is implemented by durable backends that scan their store at open,
// so that the host can say what it found.
type RecoveryReporter interface {
	// Recovery says what the open found.
	Recovery() Recovery
}

// Recovery is what a durable backend found in its store at open.
type Recovery struct {
	// Ready, Delayed and Dead count the jobs found ready (pending), delayed (or
	// deferred) and dead-lettered, over every queue; Waiting those found waiting for
	// other jobs (JobWaiting).
	Ready, Delayed, Dead, Waiting int
	// Queues counts the declared queues.
	Queues int
	// Took is how long the scan of the store took.
	Took time.Duration
}
