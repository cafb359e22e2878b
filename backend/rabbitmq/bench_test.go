package rabbitmq_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/internal/rig"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
)

// window is how many publishes await their confirm at once, in both loops.
const window = 64

// BenchmarkPublishConsume publishes b.N persistent messages from 64 publishers, each
// waiting for its confirm, then consumes them with prefetch 100 and an ack each:
// through this backend, and through a bare amqp091-go loop on the same broker that does
// the same work (the same publishers on one confirm channel, confirms, nacks and
// returns checked, the same queue arguments, prefetch and acks). Run it with
// -benchtime=20000x, the two side by side with -count, and compare msgs/s.
func BenchmarkPublishConsume(b *testing.B) {
	url := brokerURL(b)
	payload := []byte(`{"to":"ada@example.com","template":"welcome"}`)
	b.Run("backend", func(b *testing.B) {
		ctx := context.Background()
		bk := open(b, rabbitmq.Config{})
		defer bk.Close(ctx)
		deleteQueues(b, bk)
		q := backend.QueueConfig{Name: "bench-" + backend.NewID()[18:], Prefetch: 100, PriorityLevels: 2} // as the worker declares it
		rig.Must(b, bk.Declare(ctx, q))
		b.ResetTimer()
		jobs := make(chan struct{}, b.N)
		for range b.N {
			jobs <- struct{}{}
		}
		close(jobs)
		var wg sync.WaitGroup
		for range window {
			wg.Go(func() {
				for range jobs {
					if err := bk.Publish(ctx, backend.NewEnvelope(q.Name, payload), 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		published := time.Now()
		s, err := bk.Consume(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			d := <-s.Deliveries()
			if _, err := d.Envelope(); err != nil {
				b.Fatal(err)
			}
			if err := d.Ack(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		s.Drop()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(time.Since(published).Seconds(), "consume-s")
	})
	b.Run("bare-amqp091", func(b *testing.B) {
		// The backend's work without it: one connection, one channel in confirm mode
		// shared by as many publishers, each publishing persistent and mandatory and
		// waiting for its own confirm; a nack, a return or any error fails the run; then
		// one consumer with the same prefetch acking each delivery, every ack checked.
		ctx := context.Background()
		conn, ch := amqpChannel(b, url)
		name := "bench-bare-" + backend.NewID()[18:]
		if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-priority": int32(2)}); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if dch, err := conn.Channel(); err == nil {
				dch.QueueDelete(name, false, false, false)
				dch.Close()
			}
		}()
		rig.Must(b, ch.Confirm(false))
		returns := ch.NotifyReturn(make(chan amqp.Return, window))
		b.ResetTimer()
		jobs := make(chan int, b.N)
		for i := range b.N {
			jobs <- i
		}
		close(jobs)
		var wg sync.WaitGroup
		for range window {
			wg.Go(func() {
				for i := range jobs {
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, amqp.Publishing{
						MessageId: strconv.Itoa(i), Body: payload, DeliveryMode: amqp.Persistent})
					if err != nil {
						b.Error(err)
						return
					}
					if ok, err := dc.WaitContext(ctx); err != nil || !ok {
						b.Errorf("confirm of message %d: acked %v, error %v", i, ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		// A return comes before its message's confirm: every one is in by now.
		select {
		case r := <-returns:
			b.Fatalf("message %s returned: %s", r.MessageId, r.ReplyText)
		default:
		}
		if b.Failed() {
			return
		}
		published := time.Now()
		cch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		rig.Must(b, cch.Qos(100, 0, false))
		msgs, err := cch.Consume(name, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			m, ok := <-msgs
			if !ok {
				b.Fatal("the consumer's channel closed")
			}
			if err := m.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		rig.Must(b, cch.Close())
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(time.Since(published).Seconds(), "consume-s")
	})
}
