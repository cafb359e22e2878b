package rabbitmq

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestAbandonedCallTearsDownOnlyASilentConnection: a call abandoned by its caller ends
// with the connection only when the broker has gone silent: answerGrace after the later
// of the abandonment and the last byte read. A broker that keeps sending (heartbeats,
// every 5 s on an idle connection, 10 s after other traffic) keeps the connection, however
// late it answers; the call then ends when the answer comes.
func TestAbandonedCallTearsDownOnlyASilentConnection(t *testing.T) {
	t.Parallel()
	const abandonAt = 12 * time.Second
	for _, c := range []struct {
		name     string
		every    time.Duration // between the broker's heartbeats
		silentAt time.Duration // when it stops sending; 0: never
		answerAt time.Duration // when it answers the call; 0: never
		// lastRead is when the last byte came before the teardown; 0: no teardown.
		lastRead time.Duration
	}{
		{"silent from before the abandonment", 5 * time.Second, 11 * time.Second, 0, 10 * time.Second},
		{"silent a minute after the abandonment", 5 * time.Second, 75 * time.Second, 0, 75 * time.Second},
		{"alive, answering after two minutes", 5 * time.Second, 0, 2 * time.Minute, 0},
		{"alive with the longest gaps, answering after a minute", heartbeat, 0, time.Minute, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				client, broker := net.Pipe()
				l := &link{sock: newWatchedConn(client), log: slog.New(slog.DiscardHandler)}
				// The broker: a heartbeat frame every c.every until c.silentAt.
				stop, stopped := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(stopped)
					tick := time.NewTicker(c.every)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						if c.silentAt != 0 && time.Since(start) > c.silentAt {
							continue
						}
						if _, err := broker.Write(make([]byte, 8)); err != nil {
							return
						}
					}
				}()
				defer func() {
					close(stop)
					<-stopped
					broker.Close()
				}()
				// amqp091-go's reader: a closed socket fails every call under way.
				closed := make(chan struct{})
				var tornDown time.Duration
				go func() {
					buf := make([]byte, 64)
					for {
						if _, err := l.sock.Read(buf); err != nil {
							tornDown = time.Since(start)
							close(closed)
							return
						}
					}
				}()
				answer := make(chan struct{})
				if c.answerAt != 0 {
					time.AfterFunc(c.answerAt, func() { close(answer) })
				}
				returned := make(chan struct{})
				call := func() (struct{}, error) {
					defer close(returned)
					select {
					case <-answer:
						return struct{}{}, nil
					case <-closed:
						return struct{}{}, errors.New("connection closed")
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), abandonAt)
				defer cancel()
				if _, err := await(ctx, l, "a test call", call, nil); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("await: %v, want the deadline", err)
				}
				<-returned
				returnedAt := time.Since(start)
				var torn time.Duration // when the socket was closed; 0: it was not
				select {
				case <-closed:
					torn = tornDown
				default:
				}
				client.Close()
				<-closed
				if c.lastRead == 0 {
					if torn != 0 {
						t.Fatalf("the connection of a live broker was torn down %v after the start", torn)
					}
					if returnedAt != c.answerAt {
						t.Fatalf("the call returned %v after the start, want when the answer came, %v", returnedAt, c.answerAt)
					}
					return
				}
				if want := max(abandonAt, c.lastRead) + answerGrace; torn != want {
					t.Fatalf("torn down %v after the start, want %v (grace %v after the later of the abandonment and the last read)", torn, want, answerGrace)
				}
			})
		})
	}
}
