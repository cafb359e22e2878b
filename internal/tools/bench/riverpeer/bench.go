package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

// The settings of `river bench` (cmd/river/riverbench in River v0.43.0 and later). They are
// what River's authors chose to show River at its fastest; changing one makes this harness
// something other than River's own benchmark.
const (
	maxWorkers        = 2_000
	fetchCooldown     = 2 * time.Millisecond
	fetchPollInterval = 20 * time.Millisecond
	insertBatchSize   = 5_000
	// backlog is the number of unworked jobs duration mode keeps inserted ahead of the
	// workers; it is also the size of the event subscription's buffer.
	backlog = 75_000
	// refillEvery is how often duration mode checks the backlog and tops it up.
	refillEvery = 250 * time.Millisecond
	// progressEvery is how often -v prints a progress line, as river bench does.
	progressEvery = 2 * time.Second
)

// Config says which of the two shapes of `river bench` to run.
type Config struct {
	// DatabaseURL is a libpq-style URL of a database River may own: its jobs table is
	// truncated before the run.
	DatabaseURL string
	// Jobs, when positive, inserts that many jobs first and then times the client working
	// them all down (`river bench -n`).
	Jobs int
	// Duration, when positive, inserts and works at once for that long, keeping about
	// 75,000 jobs waiting (`river bench --duration`).
	Duration time.Duration
	// Fast inserts with InsertManyFast (COPY, no rows returned) instead of InsertMany,
	// which is what river bench uses.
	Fast bool
	// Progress, if set, receives a line every two seconds with the jobs worked and
	// inserted since the last one.
	Progress func(line string)
	// Logger is River's logger; nil logs warnings and errors to stderr.
	Logger *slog.Logger
	// MaxWorkers is the default queue's MaxWorkers; zero means river bench's 2,000.
	MaxWorkers int
	// HTTPDelay, when positive, replaces the no-op worker with one that makes a GET to
	// a loopback server the run starts, which answers 200 after HTTPDelay, and reads
	// the body: the job wasmjobs' bench --http-delay runs. The worker's client keeps
	// MaxWorkers idle connections.
	HTTPDelay time.Duration
}

// ErrConfig reports flags that name no shape, or both.
var ErrConfig = errors.New("riverpeer: give exactly one of -n (jobs) or --duration")

// benchArgs are the jobs' arguments; the kind is river bench's.
type benchArgs struct {
	Num int `json:"num"`
}

func (benchArgs) Kind() string { return "benchmark" }

// noopWorker works a job by doing nothing, as river bench's worker does.
type noopWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (noopWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

// Run migrates the database, empties River's jobs table, and runs one shape.
func Run(ctx context.Context, cfg Config) (measure.RiverResult, error) {
	if (cfg.Jobs > 0) == (cfg.Duration > 0) || cfg.Jobs < 0 || cfg.Duration < 0 {
		return measure.RiverResult{}, ErrConfig
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	pool, err := openPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return measure.RiverResult{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)

	workerCount := cmp.Or(cfg.MaxWorkers, maxWorkers)
	res := measure.RiverResult{RiverVersion: moduleVersion("github.com/riverqueue/river"), MaxWorkers: workerCount, InsertMethod: "InsertMany",
		HTTPDelayMs: float64(cfg.HTTPDelay) / float64(time.Millisecond)}
	if cfg.Fast {
		res.InsertMethod = "InsertManyFast"
	}
	if cfg.Jobs > 0 {
		res.Shape = "-n " + strconv.Itoa(cfg.Jobs)
	} else {
		res.Shape = "--duration " + cfg.Duration.String()
	}
	if err := pool.QueryRow(ctx, "show server_version").Scan(&res.Postgres); err != nil {
		return res, fmt.Errorf("riverpeer: asking Postgres its version: %w", err)
	}
	if err := prepare(ctx, driver, logger); err != nil {
		return res, err
	}

	workers := river.NewWorkers()
	if cfg.HTTPDelay > 0 {
		url, stop, err := measure.SlowServer(cfg.HTTPDelay)
		if err != nil {
			return res, err
		}
		defer stop()
		w := newGetWorker(url, workerCount)
		defer w.client.CloseIdleConnections()
		river.AddWorker(workers, w)
	} else {
		river.AddWorker(workers, noopWorker{})
	}
	client, err := river.NewClient(driver, &river.Config{
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workerCount}},
		Workers:           workers,
	})
	if err != nil {
		return res, fmt.Errorf("riverpeer: creating the River client: %w", err)
	}

	// Like river bench, count jobs as they come out of the completer (the subscription),
	// not as the worker returns: a job counts once its completion is written.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: backlog,
		Kinds:    []river.EventKind{river.EventKindJobCancelled, river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer unsubscribe()

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		inserted, left, worked atomic.Int64
		lastWorked             atomic.Int64 // UnixNano of the last job counted
		allWorked              = make(chan struct{})
		latencies              = make([]time.Duration, 0, max(cfg.Jobs, 0))
	)
	counted := make(chan struct{}) // closed when the counter below has returned
	go func() {
		defer close(counted)
		for {
			select {
			case <-runCtx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Kind != river.EventKindJobCompleted {
					cancel(fmt.Errorf("riverpeer: job %d ended %s (state %s), the no-op worker cannot fail", ev.Job.ID, ev.Kind, ev.Job.State))
					return
				}
				now := time.Now()
				lastWorked.Store(now.UnixNano())
				if len(latencies) < cap(latencies) {
					latencies = append(latencies, now.Sub(ev.Job.CreatedAt))
				}
				left.Add(-1)
				if n := worked.Add(1); cfg.Jobs > 0 && n == int64(cfg.Jobs) {
					close(allWorked)
				}
			}
		}
	}()
	// river bench asks Postgres every second how many jobs are available, to log it: a
	// small part of the load it puts on the database, kept so the load is the same.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				n, err := driver.GetExecutor().JobCountByState(runCtx, &riverdriver.JobCountByStateParams{State: rivertype.JobStateAvailable})
				if err == nil {
					logger.InfoContext(runCtx, "available job count", "num_jobs", n)
				}
			}
		}
	}()

	ins := inserter{client: client, fast: cfg.Fast, inserted: &inserted, left: &left}
	insertDone := make(chan error, 1)
	if cfg.Jobs > 0 {
		if err := ins.insert(runCtx, cfg.Jobs); err != nil {
			return res, err
		}
		close(insertDone)
	} else {
		ready := make(chan struct{})
		go func() { insertDone <- ins.keepBacklog(runCtx, ready) }()
		select {
		case <-ready:
		case err := <-insertDone:
			return res, err
		}
	}

	measure.ResetPeakRSS()
	rss0 := measure.StatusMB("VmRSS:")
	if err := client.Start(runCtx); err != nil {
		return res, fmt.Errorf("riverpeer: starting the River client: %w", err)
	}
	start := time.Now()
	before := sampleCPU()
	progress := time.NewTicker(progressEvery)
	defer progress.Stop()
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		deadline = time.After(cfg.Duration)
	}
	var lastIns, lastWork int64
	var runErr error
wait:
	for {
		select {
		case <-allWorked:
			break wait
		case <-deadline:
			break wait
		case err := <-insertDone:
			if err != nil {
				runErr = err
				break wait
			}
			insertDone = nil
		case <-runCtx.Done():
			runErr = context.Cause(runCtx)
			break wait
		case <-progress.C:
			if cfg.Progress != nil {
				i, w := inserted.Load(), worked.Load()
				cfg.Progress(fmt.Sprintf("bench: jobs worked [ %10d ], inserted [ %10d ], job/sec [ %10.1f ] [%s]",
					w-lastWork, i-lastIns, float64(w-lastWork)/progressEvery.Seconds(), progressEvery))
				lastIns, lastWork = i, w
			}
		}
	}
	// river bench's figure: jobs counted over the time from the client's start to the last
	// job counted, taken when the run ends (a job completed while the client stops does
	// not count).
	res.JobsInserted, res.JobsWorked = inserted.Load(), worked.Load()
	if last := lastWorked.Load(); res.JobsWorked > 0 && last > start.UnixNano() {
		res.Seconds = time.Unix(0, last).Sub(start).Seconds()
		res.JobsPerSec = float64(res.JobsWorked) / res.Seconds
	}
	after := sampleCPU()
	cancel(nil) // stops the inserter, the counter and the available-count ticker
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil && runErr == nil {
		runErr = fmt.Errorf("riverpeer: stopping the River client: %w", err)
	}
	if runErr != nil {
		return res, runErr
	}

	res.PeakRSSMB = measure.StatusMB("VmHWM:")
	res.RSSPerJobKB = max(0, res.PeakRSSMB-rss0) * 1024 / float64(workerCount)
	<-counted // runCtx is cancelled: the counter returns, and latencies is no longer written
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50Ms = float64(latencies[n/2]) / float64(time.Millisecond)
		res.P99Ms = float64(latencies[min(n-1, n*99/100)]) / float64(time.Millisecond)
	}
	res.ClientCPUS = after.self - before.self
	res.PostgresCPUS = after.postgres - before.postgres
	res.MachineCPUS = after.machine - before.machine
	if both := res.ClientCPUS + res.PostgresCPUS; both > 0 {
		res.PostgresShare = res.PostgresCPUS / both
		res.JobsPerCPUS = float64(res.JobsWorked) / both
	}
	return res, nil
}

// openPool connects as River's CLI does: pgxpool's default size, a 10 s statement timeout
// and an 11 s idle-in-transaction timeout unless the URL sets them.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("riverpeer: parsing the database URL: %w", err)
	}
	params := pc.ConnConfig.RuntimeParams
	for k, v := range map[string]string{
		"application_name":                    "wasmjobs riverpeer",
		"statement_timeout":                   "10000",
		"idle_in_transaction_session_timeout": "11000",
	} {
		if params[k] == "" {
			params[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("riverpeer: connecting to Postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("riverpeer: connecting to Postgres at %s: %w", pc.ConnConfig.Host, err)
	}
	return pool, nil
}

// prepare runs River's migrations up and then does what river bench does before each run:
// truncate River's tables and VACUUM FULL the jobs table, so no run inherits dead rows.
func prepare(ctx context.Context, driver *riverpgxv5.Driver, logger *slog.Logger) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("riverpeer: creating River's migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverpeer: running River's migrations: %w", err)
	}
	exec := driver.GetExecutor()
	if err := exec.TableTruncate(ctx, &riverdriver.TableTruncateParams{
		Table: driver.GetMigrationTruncateTables(riverdriver.MigrationLineMain, 0),
	}); err != nil {
		return fmt.Errorf("riverpeer: truncating River's tables: %w", err)
	}
	if err := exec.Exec(ctx, "VACUUM FULL river_job"); err != nil {
		return fmt.Errorf("riverpeer: vacuuming river_job: %w", err)
	}
	return nil
}

// inserter inserts benchmark jobs in river bench's batches of 5,000.
type inserter struct {
	client         *river.Client[pgx.Tx]
	fast           bool
	inserted, left *atomic.Int64
	num            int
}

func (in *inserter) batch(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		in.num++
		params[i].Args = benchArgs{Num: in.num}
	}
	var err error
	if in.fast {
		_, err = in.client.InsertManyFast(ctx, params)
	} else {
		_, err = in.client.InsertMany(ctx, params)
	}
	if err != nil {
		return fmt.Errorf("riverpeer: inserting a batch of %d jobs: %w", n, err)
	}
	in.inserted.Add(int64(n))
	in.left.Add(int64(n))
	return nil
}

// insert inserts total jobs, then returns (-n).
func (in *inserter) insert(ctx context.Context, total int) error {
	for done := 0; done < total; {
		n := min(insertBatchSize, total-done)
		if err := in.batch(ctx, n); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// keepBacklog wakes every quarter second until ctx ends and inserts batches until about
// 75,000 jobs wait, closing ready once the first backlog is in (--duration).
func (in *inserter) keepBacklog(ctx context.Context, ready chan<- struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(refillEvery):
		}
		// At least one batch per wake-up, then more until the backlog is there: river
		// bench's loop, which so inserts at least 20,000 jobs/s whatever the workers do.
		for {
			if err := in.batch(ctx, insertBatchSize); err != nil {
				if ctx.Err() != nil {
					return nil // the run ended mid-batch
				}
				return err
			}
			if in.left.Load() >= backlog {
				break
			}
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
	}
}

// moduleVersion is the version of a dependency this binary was built with.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "unknown"
}
