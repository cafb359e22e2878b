package testbroker

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Consume reads queue on the broker at url, acknowledging automatically with a
// prefetch of 1,000, on a connection of its own that the test's cleanup closes. It
// returns the channel (to ask whether it closed) and its deliveries. The test fails
// when the broker refuses the connection or the consumer.
func Consume(t testing.TB, url, queue string) (*amqp.Channel, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("testbroker: connecting to consume %s: %v", queue, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("testbroker: a channel to consume %s: %v", queue, err)
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		t.Fatalf("testbroker: the prefetch to consume %s: %v", queue, err)
	}
	msgs, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("testbroker: consuming %s: %v", queue, err)
	}
	return ch, msgs
}
