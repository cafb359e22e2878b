package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/postgres"
)

// Open the backend on a database that several hosts share, publish a job, and take it
// from a stream: every host that consumes the queue competes for it, and the one whose
// claim lands runs it. (Compiled, not run: it needs a database.)
func ExampleOpen() {
	ctx := context.Background()
	b, err := postgres.Open(ctx, postgres.Config{
		URL:   os.Getenv("WASMJOBS_PG_URL"), // postgres://user:pass@db:5432/app
		Lease: 30 * time.Second,             // a dead host's jobs go to the others after this
	})
	if errors.Is(err, postgres.ErrSchemaTooNew) {
		fmt.Println("a newer wasmjobs migrated this database:", err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close(ctx)
	q := backend.QueueConfig{Name: "resize"}
	if err := b.Declare(ctx, q); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Publish(ctx, backend.NewEnvelope("resize", []byte(`{"w":640}`)), 0); err != nil {
		fmt.Println(err)
		return
	}
	s, err := b.Consume(ctx, q)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Drop()
	d := <-s.Deliveries()
	env, _ := d.Envelope()
	fmt.Printf("%s\n", env.Payload)
	if err := d.Ack(ctx); errors.Is(err, backend.ErrStreamClosed) {
		fmt.Println("the claim lapsed: another host has the job now")
	}
}

// A schema name is checked before anything connects.
func ExampleCheckSchema() {
	fmt.Println(postgres.CheckSchema("wasmjobs_staging"))
	fmt.Println(postgres.CheckSchema("Jobs"))
	// Output:
	// <nil>
	// postgres: schema "Jobs": want a lowercase identifier (letters, digits, '_'; at most 54, so that its notification channel fits PostgreSQL's 63)
}
