package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
)

// window is how many publishes await their confirm at once, in both loops.
const window = 64

// BenchmarkPublishConsume publishes b.N persistent messages with confirms, then consumes
// them with prefetch 100 and an ack each: through this backend, and through a bare
// amqp091-go loop on the same broker. Run it with -benchtime=20000x.
func BenchmarkPublishConsume(b *testing.B) {
	url := brokerURL(b)
	payload := []byte(`{"to":"ada@example.com","template":"welcome"}`)
	b.Run("backend", func(b *testing.B) {
		ctx := context.Background()
		bk := open(b, rabbitmq.Config{})
		defer bk.Close(ctx)
		q := backend.QueueConfig{Name: "bench-" + backend.NewID()[18:], Prefetch: 100, PriorityLevels: 2} // as the worker declares it
		if err := bk.Declare(ctx, q); err != nil {
			b.Fatal(err)
		}
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
		ctx := context.Background()
		conn, err := amqp.Dial(url)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		ch, _ := conn.Channel()
		name := "bench-bare-" + backend.NewID()[18:]
		if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-max-priority": int32(2)}); err != nil {
			b.Fatal(err)
		}
		defer ch.QueueDelete(name, false, false, false)
		if err := ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		pending := make([]*amqp.DeferredConfirmation, 0, window)
		for i := range b.N {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, amqp.Publishing{
				MessageId: fmt.Sprint(i), Body: payload, DeliveryMode: amqp.Persistent})
			if err != nil {
				b.Fatal(err)
			}
			pending = append(pending, dc)
			if len(pending) == window {
				for _, dc := range pending {
					if !dc.Wait() {
						b.Fatal("nack")
					}
				}
				pending = pending[:0]
			}
		}
		for _, dc := range pending {
			dc.Wait()
		}
		published := time.Now()
		cch, _ := conn.Channel()
		cch.Qos(100, 0, false)
		msgs, err := cch.Consume(name, "", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			m := <-msgs
			if err := m.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		cch.Close()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(time.Since(published).Seconds(), "consume-s")
	})
}
