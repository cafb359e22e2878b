package testbroker

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeleteQueues deletes the named queues on the broker at url, for a test's cleanup:
// a queue left behind costs the shared broker but fails no test, so what it cannot
// delete it logs. Each queue gets a channel of its own, since a failed delete closes
// its channel.
func DeleteQueues(t testing.TB, url string, queues ...string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Logf("testbroker: deleting the test's queues: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("testbroker: deleting %s: %v", q, err)
			return
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Logf("testbroker: deleting %s: %v", q, err)
		}
		ch.Close()
	}
}
