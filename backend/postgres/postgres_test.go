package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/backendtest"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	"github.com/wasmjobs/wasmjobs/backend/postgres"
	"github.com/wasmjobs/wasmjobs/internal/rigs/testbroker"
	"github.com/wasmjobs/wasmjobs/worker"
)

// TestMain fails the package's tests if any goroutine outlives them: a closed backend
// leaves no stream, listener or put-back behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testSchema returns a schema of the test's own on the tests' database, dropped when
// the test ends, and the database's URL.
func testSchema(t *testing.T) (url, schema string) {
	t.Helper()
	url = testbroker.PostgresURL(t)
	var b [4]byte
	rand.Read(b[:])
	schema = "wasmjobs_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
		}
	})
	return url, schema
}

// open opens a backend on the test's schema, closed when the test ends.
func open(t *testing.T, cfg postgres.Config) *postgres.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := postgres.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rig.Close(t, b) })
	return b
}

func TestContract(t *testing.T) {
	url, schema := testSchema(t)
	backendtest.Run(t, backendtest.Options{
		New: func(t *testing.T) backend.Backend {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Parallel: true,
	})
}

// exec runs sql on the tests' database, as an operator (or the passing of time) would
// behind the backends' back.
func exec(t *testing.T, url, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// receive waits for the stream's next delivery.
func receive(t *testing.T, s backend.Stream, within time.Duration) (backend.Delivery, backend.Envelope) {
	t.Helper()
	select {
	case d, ok := <-s.Deliveries():
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		env, err := d.Envelope()
		if err != nil {
			t.Fatal(err)
		}
		return d, env
	case <-time.After(within):
		t.Fatalf("no delivery within %v", within)
	}
	return nil, backend.Envelope{}
}

// taken is a job published on a fresh queue of a backend on the test's own schema and
// taken from the queue's stream: the start of most of the tests below.
type taken struct {
	url, schema string
	b           *postgres.Backend
	q           backend.QueueConfig
	s           backend.Stream
	env         backend.Envelope
	d           backend.Delivery
}

// takeOne publishes env (a fresh one when its ID is empty) to q on a new backend of
// cfg (URL and Schema filled in) and receives it.
func takeOne(t *testing.T, cfg postgres.Config, q backend.QueueConfig, env backend.Envelope) taken {
	t.Helper()
	var tk taken
	tk.url, tk.schema = testSchema(t)
	cfg.URL, cfg.Schema = tk.url, tk.schema
	tk.b, tk.q = open(t, cfg), q
	tk.s = rig.Consume(t, tk.b, q)
	if env.ID == "" {
		env = backend.NewEnvelope(q.Name, []byte("x"))
	}
	tk.env = env
	rig.Must(t, tk.b.Publish(context.Background(), env, 0))
	tk.d, _ = receive(t, tk.s, 10*time.Second)
	return tk
}

// TestLapsedClaimIsRescuedAndFenced: a claim whose lease lapsed (here moved into the
// past, as a host cut off for longer than the lease would leave it) is taken by
// another host's stream, redelivered at the attempt it had; the first host's settle
// is then refused (its claim token is stale) and changes nothing, while the new
// holder's settle lands.
func TestLapsedClaimIsRescuedAndFenced(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	// a never looks again by itself (its poll an hour), so only b can take the job back.
	a := open(t, postgres.Config{URL: url, Schema: schema, Host: "a", Poll: time.Hour})
	b := open(t, postgres.Config{URL: url, Schema: schema, Host: "b", Poll: 50 * time.Millisecond})
	q := backend.QueueConfig{Name: "fenced"}
	sa := rig.Consume(t, a, q)
	env := backend.NewEnvelope(q.Name, []byte("x"))
	env.Attempt = 3
	rig.Must(t, a.Publish(ctx, env, 0))
	da, _ := receive(t, sa, 10*time.Second)

	sb := rig.Consume(t, b, q)
	if n := exec(t, url, `UPDATE `+schema+`.jobs SET lease_until = now() - interval '1 second' WHERE claimed_by = 'a'`); n != 1 {
		t.Fatalf("%d claims of a, want 1", n)
	}
	db, got := receive(t, sb, 10*time.Second)
	if got.ID != env.ID || !got.Redelivered || got.Attempt != 3 {
		t.Fatalf("rescued %+v, want %s redelivered at attempt 3", got, env.ID)
	}
	if err := da.Ack(ctx); !errors.Is(err, backend.ErrStreamClosed) {
		t.Fatalf("the lapsed claim's ack: %v, want ErrStreamClosed", err)
	}
	if st, err := b.QueueStats(ctx, q.Name); err != nil || st.Unacked != 1 {
		t.Fatalf("after the stale ack: %+v %v, want the job still claimed by b", st, err)
	}
	rig.Must(t, db.Ack(ctx))
	if st, err := b.QueueStats(ctx, q.Name); err != nil || st != (backend.QueueStats{}) {
		t.Fatalf("after b's ack: %+v %v, want nothing", st, err)
	}
}

// TestCrashLoopEndsInTheDeadLetters: a job whose claim lapses again after
// MaxRescues rescues is dead-lettered with a reason that says why, instead of
// killing host after host.
func TestCrashLoopEndsInTheDeadLetters(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b := open(t, postgres.Config{URL: url, Schema: schema, Poll: 20 * time.Millisecond, MaxRescues: 2})
	q := backend.QueueConfig{Name: "loop"}
	s := rig.Consume(t, b, q)
	env := backend.NewEnvelope(q.Name, []byte("x"))
	rig.Must(t, b.Publish(ctx, env, 0))
	for i := range 3 {
		_, got := receive(t, s, 10*time.Second)
		if got.Redelivered != (i > 0) {
			t.Fatalf("claim %d: redelivered %v", i+1, got.Redelivered)
		}
		exec(t, url, `UPDATE `+schema+`.jobs SET lease_until = now() - interval '1 second'`)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dead, err := b.DeadLetters(ctx, q.Name, 0)
		rig.Must(t, err)
		if len(dead) == 1 {
			if dead[0].Envelope.ID != env.ID || !strings.Contains(dead[0].Reason, "lapsed 3 times") || !strings.Contains(dead[0].Reason, "crash loop") {
				t.Fatalf("dead letter %+v", dead[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter after three lapses: %d", len(dead))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNotifiedWithinMilliseconds: a job published through one backend reaches a
// stream of another (a second host) by its notification, long before its poll.
func TestNotifiedWithinMilliseconds(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	pub := open(t, postgres.Config{URL: url, Schema: schema})
	sub := open(t, postgres.Config{URL: url, Schema: schema, Poll: time.Hour})
	q := backend.QueueConfig{Name: "notified"}
	rig.Must(t, pub.Declare(ctx, q))
	s := rig.Consume(t, sub, q)
	time.Sleep(200 * time.Millisecond) // the stream's first look (empty) is over: only a notification wakes it now
	var worst time.Duration
	for range 20 {
		start := time.Now()
		rig.Must(t, pub.Publish(ctx, backend.NewEnvelope(q.Name, nil), 0))
		d, _ := receive(t, s, 10*time.Second)
		worst = max(worst, time.Since(start))
		rig.Must(t, d.Ack(ctx))
	}
	if worst > 2*time.Second {
		t.Fatalf("slowest publish to delivery %v, want well under the hour's poll", worst)
	}
	t.Logf("slowest publish to delivery of 20: %v", worst)
}

// TestSchemaNewerThanTheBinaryIsRefused: a schema migrated by a newer wasmjobs is
// refused at Open, naming both versions.
func TestSchemaNewerThanTheBinaryIsRefused(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	open(t, postgres.Config{URL: url, Schema: schema})
	exec(t, url, `INSERT INTO `+schema+`.migrations (version) VALUES (99)`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
	if !errors.Is(err, postgres.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 99") || !strings.Contains(err.Error(), fmt.Sprint(postgres.SchemaVersion)) {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaTooNew naming 99 and %d", err, postgres.SchemaVersion)
	}
}

// TestConfigRefused: bad configuration is refused at Open, naming the problem.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  postgres.Config
		want string
	}{
		{postgres.Config{URL: "postgres://x@/db", Schema: "Bad-Name"}, `schema "Bad-Name"`},
		{postgres.Config{URL: "postgres://x@/db", Lease: time.Millisecond}, "want a lease of at least 1s"},
		{postgres.Config{URL: "postgres://x@/db", Schema: strings.Repeat("s", 55)}, "at most 54"},
		{postgres.Config{URL: "::not a url"}, "the database URL"},
	} {
		_, err := postgres.Open(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

// TestFailedSettlePutsTheJobBack: a settle the database refuses (here a trigger that
// fails every ack, as a database in trouble might) leaves the job unsettled and no
// longer the stream's: it comes back, redelivered, instead of holding its prefetch
// slot, its lease renewed, for as long as the host lives; settling the old delivery
// again is refused, since the job went back.
func TestFailedSettlePutsTheJobBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := takeOne(t, postgres.Config{}, backend.QueueConfig{Name: "refused", Prefetch: 1}, backend.Envelope{})
	url, schema, s, env, d := tk.url, tk.schema, tk.s, tk.env, tk.d
	exec(t, url, `CREATE FUNCTION `+schema+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
		CREATE TRIGGER refuse BEFORE UPDATE ON `+schema+`.jobs FOR EACH ROW WHEN (NEW.state = 3) EXECUTE FUNCTION `+schema+`.refuse()`)
	err := d.Ack(ctx)
	var te *backend.TransportError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("ack against the trigger: %v, want the database's refusal", err)
	}
	exec(t, url, `DROP TRIGGER refuse ON `+schema+`.jobs`)
	again, got := receive(t, s, 10*time.Second)
	if got.ID != env.ID || !got.Redelivered {
		t.Fatalf("after the refused ack: %+v, want %s again, redelivered", got, env.ID)
	}
	if err := d.Ack(ctx); !errors.Is(err, backend.ErrStreamClosed) {
		t.Fatalf("the old delivery's second ack: %v, want ErrStreamClosed", err)
	}
	rig.Must(t, again.Ack(ctx))
}

// TestSettleUnknownPutsTheJobBack: a settle whose context ends while its write waits
// (here on a row lock the test holds) returns ErrSettleUnknown, and the job is never
// left stuck claimed: either the write landed after all (the cancel reached the
// database after the lock went) and the job is back as the retry put it, or the
// put-back that follows landed and the job comes back, redelivered.
func TestSettleUnknownPutsTheJobBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := takeOne(t, postgres.Config{}, backend.QueueConfig{Name: "unknown", Prefetch: 1}, backend.Envelope{})
	url, schema, b, q, s, env, d := tk.url, tk.schema, tk.b, tk.q, tk.s, tk.env, tk.d

	conn, err := pgx.Connect(ctx, url)
	rig.Must(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	rig.Must(t, err)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+schema+`.jobs FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// A retry, not an ack: an ack's batch runs on under the backend's own context (its
	// caller stops waiting, the delete still lands), a retry's statement is the
	// caller's and is cancelled on the server with its context.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := d.Retry(short, env, 0); !errors.Is(err, backend.ErrSettleUnknown) {
		t.Fatalf("retry under the lock: %v, want ErrSettleUnknown", err)
	}
	if err := d.Ack(ctx); !errors.Is(err, backend.ErrAlreadySettled) {
		t.Fatalf("an ack after it: %v, want ErrAlreadySettled", err)
	}
	rig.Must(t, tx.Rollback(ctx))
	deadline := time.After(10 * time.Second)
	for {
		select {
		case again := <-s.Deliveries():
			got, _ := again.Envelope()
			if got.ID != env.ID {
				t.Fatalf("after the unknown retry: %+v, want %s again", got, env.ID)
			}
			rig.Must(t, again.Ack(ctx))
			if got.Redelivered {
				t.Log("the retry was cancelled on the server; the put-back landed")
			} else {
				t.Log("the retry landed after all")
			}
			return
		case <-deadline:
			st, err := b.QueueStats(ctx, q.Name)
			t.Fatalf("10 s after the unknown retry: stats %+v %v; want the job back", st, err)
		}
	}
}

// TestBatchedAcksAnswerEachClaim: acknowledgements made at once go to the database
// together, and each learns its own answer: those whose claim token went stale (here
// changed behind the backend's back, as another host's rescue would) are refused and
// stay claimed, the others finish theirs.
func TestBatchedAcksAnswerEachClaim(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "batched", Prefetch: 40}
	s := rig.Consume(t, b, q)
	var pubs []backend.Publication
	for i := range 40 {
		pubs = append(pubs, backend.Publication{Envelope: backend.NewEnvelope(q.Name, []byte(fmt.Sprint(i)))})
	}
	rig.Must(t, b.PublishBatch(ctx, pubs))
	ds := make(map[string]backend.Delivery)
	for range 40 {
		d, env := receive(t, s, 10*time.Second)
		ds[string(env.Payload)] = d
	}
	stale := exec(t, url, `UPDATE `+schema+`.jobs SET claim_token = claim_token + 1 WHERE convert_from(payload, 'UTF8')::int % 2 = 0`)
	if stale != 20 {
		t.Fatalf("%d claims made stale, want 20", stale)
	}
	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, d := range ds {
		wg.Go(func() {
			err := d.Ack(ctx)
			mu.Lock()
			errs[p] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for p, err := range errs {
		var i int
		fmt.Sscan(p, &i)
		if i%2 == 0 && !errors.Is(err, backend.ErrStreamClosed) {
			t.Errorf("job %s, stale: ack %v, want ErrStreamClosed", p, err)
		}
		if i%2 == 1 && err != nil {
			t.Errorf("job %s: ack %v", p, err)
		}
	}
	if st, err := b.QueueStats(ctx, q.Name); err != nil || st.Unacked != 20 {
		t.Fatalf("after the acks: %+v %v, want the 20 stale claims left", st, err)
	}
}

// TestNULInTextIsKept: a reason, a header, a key or an id with a NUL (a guest's reason
// may hold one; PostgreSQL's text cannot) is stored with U+FFFD in its place, and the
// settle lands, rather than failing every time and bringing the job back for ever.
func TestNULInTextIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := backend.NewEnvelope("nul", []byte("x"))
	env.Headers = map[string]string{"h\x00": "v\x00"}
	env.Key = "k\x00"
	tk := takeOne(t, postgres.Config{}, backend.QueueConfig{Name: "nul"}, env)
	b, q, s, d := tk.b, tk.q, tk.s, tk.d
	got, _ := d.Envelope()
	if got.Headers["h\uFFFD"] != "v\uFFFD" || got.Key != "k\uFFFD" {
		t.Fatalf("published with NULs: headers %q key %q", got.Headers, got.Key)
	}
	next := got
	next.Attempt, next.Reason = 2, "failed:\x00 here"
	rig.Must(t, d.Retry(ctx, next, 0))
	d, got = receive(t, s, 10*time.Second)
	if got.Reason != "failed:\uFFFD here" || got.Attempt != 2 {
		t.Fatalf("retried with a NUL in its reason: %+v", got)
	}
	rig.Must(t, d.DeadLetter(ctx, "dead:\x00"))
	dead, err := b.DeadLetters(ctx, q.Name, 0)
	if err != nil || len(dead) != 1 || dead[0].Reason != "dead:\uFFFD" {
		t.Fatalf("dead letters %+v %v", dead, err)
	}
}

// TestRetryToAQueueHoldingTheIDFails: a retry onto another queue that holds a job of
// the same id is no repeat to drop: it fails, the job goes back where it was, and
// nothing is lost.
func TestRetryToAQueueHoldingTheIDFails(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q, other := backend.QueueConfig{Name: "from"}, backend.QueueConfig{Name: "to"}
	rig.Must(t, b.Declare(ctx, other))
	s := rig.Consume(t, b, q)
	env := backend.NewEnvelope(q.Name, []byte("x"))
	rig.Must(t, b.Publish(ctx, env, 0))
	held := env
	held.Queue, held.Payload = other.Name, []byte("already there")
	rig.Must(t, b.Publish(ctx, held, 0))
	d, got := receive(t, s, 10*time.Second)
	next := got
	next.Queue = other.Name
	if err := d.Retry(ctx, next, 0); err == nil || !strings.Contains(err.Error(), "holds a job of that id") {
		t.Fatalf("retry onto a queue holding the id: %v, want it refused", err)
	}
	again, got := receive(t, s, 10*time.Second)
	if got.ID != env.ID || string(got.Payload) != "x" {
		t.Fatalf("after the refused retry: %+v, want the job back on its queue", got)
	}
	rig.Must(t, again.Ack(ctx))
	if st, err := b.QueueStats(ctx, other.Name); err != nil || st.Pending != 1 {
		t.Fatalf("the other queue: %+v %v, want its own job alone", st, err)
	}
}

// TestLeaseLostStopsTheJobs: a host that stops reaching the database (its connections
// frozen behind a proxy) loses its claims at two thirds of their lease, while they are
// still its own: the running job's handler is stopped (worker.ErrLost) before the lease runs
// out, another host takes the job once it has, redelivered, and the first host's
// stream ends with ErrLeaseLost.
func TestLeaseLostStopsTheJobs(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	proxy, viaProxy := testbroker.NewPostgresProxy(t, url)
	const lease = 6 * time.Second
	a := open(t, postgres.Config{URL: viaProxy, Schema: schema, Host: "a", Lease: lease})
	t.Cleanup(proxy.Thaw) // before a's Close, which the cleanups run after this one
	b := open(t, postgres.Config{URL: url, Schema: schema, Host: "b", Poll: 50 * time.Millisecond})
	q := backend.QueueConfig{Name: "leased", PriorityLevels: 2} // declared by the worker's Register

	started := make(chan struct{})
	stopped := make(chan error, 1)
	w := worker.New(a, worker.Config{Concurrency: 1})
	rig.Must(t, w.Register(ctx, worker.Queue{Name: q.Name, PriorityLevels: q.PriorityLevels, Handler: worker.HandlerFunc(func(ctx context.Context, _ *worker.Job) worker.Result {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return worker.Result{Outcome: worker.Failed, Reason: "stopped"}
	})}))
	rig.Must(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		w.Stop(sctx)
	})
	env := backend.NewEnvelope(q.Name, []byte("x"))
	rig.Must(t, b.Publish(ctx, env, 0))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never started on a")
	}
	proxy.Freeze()
	frozen := time.Now()
	select {
	case cause := <-stopped:
		if !errors.Is(cause, worker.ErrLost) {
			t.Fatalf("the handler's context ended with %v, want worker.ErrLost", cause)
		}
	case <-time.After(2 * lease):
		t.Fatal("the handler was not stopped")
	}
	took := time.Since(frozen)
	var leaseLeft float64
	conn, err := pgx.Connect(ctx, url)
	rig.Must(t, err)
	defer conn.Close(ctx)
	rig.Must(t, conn.QueryRow(ctx, `SELECT extract(epoch FROM lease_until - now()) FROM `+schema+`.jobs WHERE id = $1`, env.ID).Scan(&leaseLeft))
	if leaseLeft <= 0 {
		t.Fatalf("the handler stopped %v after the freeze, its lease already over (%.3f s left): another host could have run the job beside it", took, leaseLeft)
	}
	sb := rig.Consume(t, b, q)
	db, got := receive(t, sb, 2*lease)
	if got.ID != env.ID || !got.Redelivered {
		t.Fatalf("b took %+v, want %s redelivered", got, env.ID)
	}
	rig.Must(t, db.Ack(ctx))
	t.Logf("handler stopped %v after the freeze with %.2f s of its lease left", took.Round(time.Millisecond), leaseLeft)
}

// TestOutageRiddenOut: a host whose database stops answering for a while (its
// connections frozen behind a proxy, for less than the lease) carries on by itself once
// it answers again: every job is done and nothing is dead-lettered; and a drain during
// an outage still ends within its deadline (plus the worker's grace), the jobs it could
// not settle left to their leases.
func TestOutageRiddenOut(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	proxy, viaProxy := testbroker.NewPostgresProxy(t, url)
	a := open(t, postgres.Config{URL: viaProxy, Schema: schema, Poll: 100 * time.Millisecond})
	t.Cleanup(proxy.Thaw)
	pub := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "outage", PriorityLevels: 2}
	rig.Must(t, pub.Declare(ctx, q))

	var mu sync.Mutex
	done := make(map[string]int)
	holding := make(chan struct{}) // the job "hold" runs until the drain ends it
	w := worker.New(a, worker.Config{Concurrency: 4})
	rig.Must(t, w.Register(ctx, worker.Queue{Name: q.Name, PriorityLevels: q.PriorityLevels, Handler: worker.HandlerFunc(func(ctx context.Context, job *worker.Job) worker.Result {
		if string(job.Envelope.Payload) == "hold" {
			close(holding)
			<-ctx.Done()
			return worker.Result{Outcome: worker.Failed, Reason: "stopped"}
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return worker.Result{Outcome: worker.Failed, Reason: "stopped"}
		}
		mu.Lock()
		done[job.Envelope.ID]++
		mu.Unlock()
		return worker.Result{}
	})}))
	rig.Must(t, w.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			w.Stop(context.Background())
		}
	})
	const jobs = 300
	var pubs []backend.Publication
	for range jobs {
		pubs = append(pubs, backend.Publication{Envelope: backend.NewEnvelope(q.Name, nil)})
	}
	rig.Must(t, pub.PublishBatch(ctx, pubs))
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(done)
	}
	waitUntil := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (%d jobs done)", what, within, count())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil("a third done", 30*time.Second, func() bool { return count() >= jobs/3 })
	proxy.Freeze()
	time.Sleep(5 * time.Second) // under the 30 s lease: the claims stay the host's
	proxy.Thaw()
	waitUntil("every job done after the outage", 60*time.Second, func() bool {
		st, err := pub.QueueStats(ctx, q.Name)
		return count() == jobs && err == nil && st == (backend.QueueStats{})
	})

	// A drain while the database is away: a job in flight that only the drain ends.
	rig.Must(t, pub.Publish(ctx, backend.NewEnvelope(q.Name, []byte("hold")), 0))
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the last job never started")
	}
	proxy.Freeze()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	w.Stop(sctx)
	stopped = true
	if took := time.Since(start); took > 2*time.Second+3*time.Second {
		t.Fatalf("the drain during the outage took %v, past its 2 s and the worker's grace", took)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range done {
		if n > 2 {
			t.Fatalf("job %s done %d times", id, n)
		}
	}
}

// TestRecordsPrunedPastTheirCount: finished rows past Records.MaxCount go at the next
// prune, the oldest first, and with MaxCount negative an ack keeps no record at all.
func TestRecordsPrunedPastTheirCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		maxCount int
		kept     int
	}{{"two kept", 2, 2}, {"none kept", -1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, schema := testSchema(t)
			b := open(t, postgres.Config{URL: url, Schema: schema, Records: backend.RecordConfig{MaxCount: tc.maxCount, PruneInterval: 50 * time.Millisecond}})
			q := backend.QueueConfig{Name: "pruned", Prefetch: 8}
			rig.Must(t, b.Declare(ctx, q))
			s := rig.Consume(t, b, q)
			var ids []string
			for i := range 5 {
				env := backend.NewEnvelope(q.Name, []byte(fmt.Sprint(i)))
				rig.Must(t, b.Publish(ctx, env, 0))
				d, _ := receive(t, s, 10*time.Second)
				rig.Must(t, d.Ack(ctx))
				ids = append(ids, env.ID)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				var have []string
				for _, id := range ids {
					if _, err := b.JobRecord(ctx, id); err == nil {
						have = append(have, id)
					} else if !errors.Is(err, backend.ErrNotFound) {
						t.Fatal(err)
					}
				}
				if len(have) == tc.kept && (tc.kept == 0 || strings.Join(have, " ") == strings.Join(ids[len(ids)-tc.kept:], " ")) {
					st, err := b.StoreStats(ctx)
					rig.Must(t, err)
					if st.Records != tc.kept || st.Bytes["jobs"] <= 0 || st.Bytes["unique_keys"] <= 0 {
						t.Fatalf("store stats %+v, want %d records and the tables' sizes", st, tc.kept)
					}
					if want := uint64(len(ids) - tc.kept); tc.maxCount > 0 && st.Pruned != want {
						t.Fatalf("store stats say %d pruned, want %d", st.Pruned, want)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("records kept %v of %v, want the newest %d", have, ids, tc.kept)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestUniqueKeysExactAcrossHosts: two backends on one schema (two hosts) publish one
// key 500 times each, all at once: one job is queued and every other publish names
// it. Its hold then outlives the job as the key's For says, whether the finished row
// stays as a record or the ack deletes it (no records kept), and a key held for
// nothing after its job is free again once the job is acknowledged; a retry that puts
// another id in the job's place hands the key to it.
func TestUniqueKeysExactAcrossHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		records backend.RecordConfig
	}{
		{"records kept", backend.RecordConfig{}},
		{"no records", backend.RecordConfig{MaxCount: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, schema := testSchema(t)
			ctx := context.Background()
			hosts := []*postgres.Backend{
				open(t, postgres.Config{URL: url, Schema: schema, Host: "a", Records: tc.records}),
				open(t, postgres.Config{URL: url, Schema: schema, Host: "b", Records: tc.records}),
			}
			q := backend.QueueConfig{Name: "unique", Prefetch: 1}
			rig.Must(t, hosts[0].Declare(ctx, q))
			unique := func(b *postgres.Backend, key string, hold time.Duration) backend.UniqueResult {
				t.Helper()
				res, err := b.PublishUnique(ctx, []backend.UniquePublication{{
					Publication: backend.Publication{Envelope: backend.NewEnvelope(q.Name, []byte(key))}, Key: key, For: hold}})
				if err != nil || len(res) != 1 {
					t.Fatalf("PublishUnique(%q): %v %v", key, res, err)
				}
				return res[0]
			}
			const each = 500
			results := make([]backend.UniqueResult, 2*each)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range results {
				wg.Go(func() {
					<-start
					results[i] = unique(hosts[i%2], "one", time.Hour)
				})
			}
			close(start)
			wg.Wait()
			var queued []string
			for _, r := range results {
				if !r.Duplicate {
					queued = append(queued, r.ID)
				}
			}
			if len(queued) != 1 {
				t.Fatalf("%d jobs queued of one key from two hosts, want 1", len(queued))
			}
			for i, r := range results {
				if r.ID != queued[0] {
					t.Fatalf("publish %d names %s, not the queued %s", i, r.ID, queued[0])
				}
			}
			s := rig.Consume(t, hosts[1], q)
			d, _ := receive(t, s, 10*time.Second)
			rig.Must(t, d.Ack(ctx))
			if r := unique(hosts[0], "one", time.Hour); !r.Duplicate || r.ID != queued[0] {
				t.Fatalf("after the ack, within the hold: %+v, want a duplicate of %s", r, queued[0])
			}

			// Held for nothing after its job: free once the job is acknowledged.
			first := unique(hosts[0], "brief", 0)
			d, _ = receive(t, s, 10*time.Second)
			if r := unique(hosts[1], "brief", 0); !r.Duplicate || r.ID != first.ID {
				t.Fatalf("while running: %+v, want a duplicate of %s", r, first.ID)
			}
			rig.Must(t, d.Ack(ctx))
			if r := unique(hosts[1], "brief", 0); r.Duplicate {
				t.Fatalf("after the ack of a key held for nothing after: %+v, want a new job", r)
			}
			d, _ = receive(t, s, 10*time.Second)
			rig.Must(t, d.Ack(ctx))

			// A retry under another id takes the key with it.
			held := unique(hosts[0], "moved", 0)
			d, env := receive(t, s, 10*time.Second)
			next := env
			next.ID = backend.NewEnvelope(q.Name, nil).ID
			rig.Must(t, d.Retry(ctx, next, time.Hour))
			if r := unique(hosts[1], "moved", 0); !r.Duplicate || r.ID != next.ID {
				t.Fatalf("after a retry as %s: %+v, want a duplicate of the retry (the first was %s)", next.ID, r, held.ID)
			}
		})
	}
}

// TestEndedUniqueKeysArePruned: a key whose hold has ended leaves its table at the next
// prune, while a key still held (its job waiting) stays.
func TestEndedUniqueKeysArePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := testSchema(t)
	b := open(t, postgres.Config{URL: url, Schema: schema, Records: backend.RecordConfig{PruneInterval: 50 * time.Millisecond}})
	q := backend.QueueConfig{Name: "keys"}
	rig.Must(t, b.Declare(ctx, q))
	for _, key := range []string{"ended", "held"} {
		_, err := b.PublishUnique(ctx, []backend.UniquePublication{{
			Publication: backend.Publication{Envelope: backend.NewEnvelope(q.Name, []byte(key))}, Key: key, For: time.Millisecond}})
		rig.Must(t, err)
	}
	s := rig.Consume(t, b, q)
	d, env := receive(t, s, 10*time.Second)
	rig.Must(t, d.Ack(ctx))
	ended := string(env.Payload)
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := exec(t, url, `SELECT 1 FROM `+schema+`.unique_keys`)
		gone := exec(t, url, `SELECT 1 FROM `+schema+`.unique_keys WHERE key = $1`, ended) == 0
		if all == 1 && gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d unique keys left after %q's hold ended (it gone: %v), want only the other", all, ended, gone)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRepeatPublishLocksNoLiveRow: a repeat publish of an id the queue holds live (a
// parent's children published again) neither waits for nor takes that row's lock, so
// it can never stall or deadlock with the claim's renewal or settle; here the row is
// locked by another transaction the whole time, and every kind of publish returns.
func TestRepeatPublishLocksNoLiveRow(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "locked"}
	s := rig.Consume(t, b, q)
	env := backend.NewEnvelope(q.Name, []byte("x"))
	rig.Must(t, b.Publish(ctx, env, 0))
	d, _ := receive(t, s, 10*time.Second)
	conn, err := pgx.Connect(ctx, url)
	rig.Must(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	rig.Must(t, err)
	defer tx.Rollback(ctx)
	// As a renewal does: an update in flight, which an insert's conflict check on the
	// row would wait for.
	if _, err := tx.Exec(ctx, `UPDATE `+schema+`.jobs SET lease_until = lease_until WHERE id = $1`, env.ID); err != nil {
		t.Fatal(err)
	}
	other := backend.NewEnvelope(q.Name, []byte("y"))
	for _, tc := range []struct {
		name string
		pub  func(ctx context.Context) error
	}{
		{"Publish", func(ctx context.Context) error { return b.Publish(ctx, env, 0) }},
		{"PublishBatch", func(ctx context.Context) error {
			return b.PublishBatch(ctx, []backend.Publication{{Envelope: env}, {Envelope: other}})
		}},
		{"PublishUnique", func(ctx context.Context) error {
			_, err := b.PublishUnique(ctx, []backend.UniquePublication{{Publication: backend.Publication{Envelope: env}, Key: "k"}})
			return err
		}},
	} {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := tc.pub(pctx)
		cancel()
		if err != nil {
			t.Fatalf("%s of a held id while its row is locked: %v, want it dropped at once", tc.name, err)
		}
	}
	rig.Must(t, tx.Rollback(ctx))
	rig.Must(t, d.Ack(ctx))
	d, got := receive(t, s, 10*time.Second)
	if got.ID != other.ID {
		t.Fatalf("after the repeats, delivered %s, want only the other job, %s", got.ID, other.ID)
	}
	rig.Must(t, d.Ack(ctx))
	if st, err := b.QueueStats(ctx, q.Name); err != nil || st != (backend.QueueStats{}) {
		t.Fatalf("after the repeats and the acks: %+v %v, want nothing left", st, err)
	}
	// The unique publish of the held id was dropped as a repeat, so it took no key.
	res, err := b.PublishUnique(ctx, []backend.UniquePublication{{Publication: backend.Publication{Envelope: backend.NewEnvelope(q.Name, nil)}, Key: "k"}})
	if err != nil || res[0].Duplicate {
		t.Fatalf("a publish of the key the dropped repeat named: %+v %v, want a new job", res, err)
	}
}

// TestUniquePublishNeverBlocksTheHoldersSettle: a unique publish that finds its key
// held reads the holder and locks nothing of it, so the holder's ack (whose trigger
// ends the key's hold) lands at once even while that publish's transaction is still
// open (here held up by a record of another of its jobs, locked by someone else).
// And two publications of one id with two keys, the id held live, leave no key held.
func TestUniquePublishNeverBlocksTheHoldersSettle(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "held", Prefetch: 1}
	rig.Must(t, b.Declare(ctx, q))
	s := rig.Consume(t, b, q)
	unique := func(env backend.Envelope, key string) backend.UniquePublication {
		return backend.UniquePublication{Publication: backend.Publication{Envelope: env}, Key: key, For: time.Hour}
	}
	// A record, y, whose row another transaction will hold.
	y := backend.NewEnvelope(q.Name, []byte("y"))
	rig.Must(t, b.Publish(ctx, y, 0))
	d, _ := receive(t, s, 10*time.Second)
	rig.Must(t, d.Ack(ctx))
	// The key's holder, running.
	holder := backend.NewEnvelope(q.Name, []byte("holder"))
	if _, err := b.PublishUnique(ctx, []backend.UniquePublication{unique(holder, "k")}); err != nil {
		t.Fatal(err)
	}
	dh, _ := receive(t, s, 10*time.Second)

	conn, err := pgx.Connect(ctx, url)
	rig.Must(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	rig.Must(t, err)
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+schema+`.jobs WHERE id = $1 FOR UPDATE`, y.ID); err != nil {
		t.Fatal(err)
	}
	published := make(chan error, 1)
	go func() {
		_, err := b.PublishUnique(ctx, []backend.UniquePublication{unique(backend.NewEnvelope(q.Name, nil), "k"), {Publication: backend.Publication{Envelope: y}}})
		published <- err
	}()
	// Until the publish has read the key and waits on y.
	for deadline := time.Now().Add(10 * time.Second); exec(t, url, `SELECT 1 FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, schema) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the publish never came to wait on y's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = dh.Ack(actx)
	cancel()
	if err != nil {
		t.Fatalf("the holder's ack while a duplicate publish is open: %v, want it landed at once", err)
	}
	rig.Must(t, tx.Rollback(ctx))
	rig.Must(t, <-published)

	// Two publications of one id, held live, with two keys: neither key stays held.
	x := backend.NewEnvelope(q.Name, []byte("x"))
	rig.Must(t, b.Publish(ctx, x, 0))
	res, err := b.PublishUnique(ctx, []backend.UniquePublication{unique(x, "k1"), unique(x, "k2")})
	if err != nil || !res[0].Duplicate || !res[1].Duplicate {
		t.Fatalf("unique publishes of a held id: %+v %v, want both duplicates (nothing queued)", res, err)
	}
	for _, key := range []string{"k1", "k2"} {
		if n := exec(t, url, `SELECT 1 FROM `+schema+`.unique_keys WHERE key = $1`, key); n != 0 {
			t.Fatalf("key %s left held by a publish that queued nothing", key)
		}
	}
}

// TestRecordsPrunedByTheDatabasesAge: a record goes once it is older than
// Records.MaxAge by the database's clock, whatever finish time the host's clock wrote
// into it: a host whose clock is hours behind does not get its records pruned early.
func TestRecordsPrunedByTheDatabasesAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := testSchema(t)
	b := open(t, postgres.Config{URL: url, Schema: schema, Records: backend.RecordConfig{MaxAge: time.Hour, PruneInterval: 50 * time.Millisecond}})
	q := backend.QueueConfig{Name: "aged", Prefetch: 2}
	rig.Must(t, b.Declare(ctx, q))
	s := rig.Consume(t, b, q)
	var ids []string
	for range 2 {
		env := backend.NewEnvelope(q.Name, nil)
		rig.Must(t, b.Publish(ctx, env, 0))
		d, _ := receive(t, s, 10*time.Second)
		// The host's clock says the run ended three hours ago.
		rig.Must(t, d.(backend.AtomicDelivery).AckWith(ctx, nil, &backend.JobRecord{FinishedAt: time.Now().Add(-3 * time.Hour)}))
		ids = append(ids, env.ID)
	}
	// The database ages one of them past the hour.
	if n := exec(t, url, `UPDATE `+schema+`.jobs SET updated_at = now() - interval '2 hours' WHERE id = $1`, ids[0]); n != 1 {
		t.Fatalf("aged %d rows, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err0 := b.JobRecord(ctx, ids[0])
		if errors.Is(err0, backend.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the record two hours old by the database: %v, want it pruned", err0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := b.JobRecord(ctx, ids[1]); err != nil {
		t.Fatalf("the record the host's clock dated three hours back: %v, want it kept", err)
	}
}

// TestJobEnvelopeIsWhatARetryReplays: of a job that died twice (published again after
// its first death), the envelope shown is the dead letter a retry now replays.
func TestJobEnvelopeIsWhatARetryReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := testSchema(t)
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "twice"}
	rig.Must(t, b.Declare(ctx, q))
	s := rig.Consume(t, b, q)
	env := backend.NewEnvelope(q.Name, []byte("a"))
	for _, p := range []string{"a", "b"} {
		env.Payload = []byte(p)
		rig.Must(t, b.Publish(ctx, env, 0))
		d, _ := receive(t, s, 10*time.Second)
		rig.Must(t, d.DeadLetter(ctx, "died "+p))
	}
	shown, err := b.JobEnvelope(ctx, env.ID)
	rig.Must(t, err)
	rig.Must(t, b.RetryJobNow(ctx, env.ID))
	_, replayed := receive(t, s, 10*time.Second)
	if string(shown.Payload) != string(replayed.Payload) {
		t.Fatalf("JobEnvelope showed %q, the retry replayed %q: want the same", shown.Payload, replayed.Payload)
	}
}

// TestListJobsPagesPastTheScanBound: a page as large as the scan's bound still says
// where the next one starts.
func TestListJobsPagesPastTheScanBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := testSchema(t)
	b := open(t, postgres.Config{URL: url, Schema: schema})
	q := backend.QueueConfig{Name: "many"}
	rig.Must(t, b.Declare(ctx, q))
	const n = 10_001 // one past the scan's bound
	pubs := make([]backend.Publication, n)
	for i := range pubs {
		pubs[i] = backend.Publication{Envelope: backend.NewEnvelope(q.Name, nil)}
	}
	rig.Must(t, b.PublishBatch(ctx, pubs))
	seen := 0
	f := backend.JobFilter{Limit: n}
	for pages := 0; ; pages++ {
		page, err := b.ListJobs(ctx, q.Name, f)
		rig.Must(t, err)
		seen += len(page.Jobs)
		if page.Next == "" {
			break
		}
		if pages > 3 {
			t.Fatalf("more than %d pages", pages)
		}
		f.Cursor = page.Next
	}
	if seen != n {
		t.Fatalf("listed %d jobs over the pages, want %d", seen, n)
	}
}

// TestMigrateDownAndUpKeepsTheQueuedJobs: an operator takes the schema down to version
// 1 and up again by hand (Migrate): a job that waited survives both ways, a host that
// migrates nothing (NoMigrate) refuses the older schema, naming both versions, and
// serves once it is up again.
func TestMigrateDownAndUpKeepsTheQueuedJobs(t *testing.T) {
	t.Parallel()
	url, schema := testSchema(t)
	ctx := context.Background()
	b, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
	rig.Must(t, err)
	q := backend.QueueConfig{Name: "kept"}
	rig.Must(t, b.Declare(ctx, q))
	env := backend.NewEnvelope(q.Name, []byte("waits"))
	rig.Must(t, b.Publish(ctx, env, 0))
	rig.Must(t, b.Close(ctx))

	for _, step := range []struct {
		to, from int
		down     bool
	}{{1, postgres.SchemaVersion, true}, {postgres.SchemaVersion, 1, false}} {
		// The other way first: a schema past to that way is left as it is.
		if from, err := postgres.Migrate(ctx, url, schema, step.to, !step.down); err != nil || from != step.from {
			t.Fatalf("Migrate to %d the other way: from %d, %v; want from %d, nothing done", step.to, from, err, step.from)
		}
		from, err := postgres.Migrate(ctx, url, schema, step.to, step.down)
		if err != nil || from != step.from {
			t.Fatalf("Migrate to %d: from %d, %v; want from %d", step.to, from, err, step.from)
		}
		if v, err := postgres.SchemaVersionOf(ctx, url, schema); err != nil || v != step.to {
			t.Fatalf("after Migrate to %d: version %d, %v", step.to, v, err)
		}
		if step.to == 1 {
			_, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, NoMigrate: true})
			if !errors.Is(err, postgres.ErrSchemaTooOld) || !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), fmt.Sprint(postgres.SchemaVersion)) {
				t.Fatalf("Open without migrating a version 1 schema: %v, want ErrSchemaTooOld naming both versions", err)
			}
		}
	}
	if _, err := postgres.Migrate(ctx, url, schema, 0, true); err == nil {
		t.Fatal("Migrate to version 0: no error, want one (drop the schema instead)")
	}
	b = open(t, postgres.Config{URL: url, Schema: schema, NoMigrate: true})
	s := rig.Consume(t, b, q)
	d, got := receive(t, s, 10*time.Second)
	if got.ID != env.ID || string(got.Payload) != "waits" {
		t.Fatalf("after down and up: %s %q, want the job that waited", got.ID, got.Payload)
	}
	rig.Must(t, d.Ack(ctx))
}
