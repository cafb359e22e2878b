package fleet

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Defaults of Config.
const (
	DefaultHeartbeat = 10 * time.Second
	DefaultRepublish = time.Hour
	// maxRefusals is how many refused pushes a follower remembers for /v1/modules.
	maxRefusals = 100
	// publishTimeout bounds a heartbeat's or a re-publish's wait for the broker.
	publishTimeout = 10 * time.Second
)

// Config configures a Follower.
type Config struct {
	URLs   []string // the broker's node URLs, tried in order
	Stream string   // the stream; DefaultStream if empty
	Dir    string   // the modules directory pushed modules are written into
	// TrustKey, when set, is the only key whose signed pushes are taken; unsigned and
	// wrongly signed ones are refused, logged and listed by Refused.
	TrustKey  ed25519.PublicKey
	HostID    string        // names the host in its heartbeats
	Heartbeat time.Duration // how often the host reports its versions; DefaultHeartbeat if 0
	// Republish is the age past which a host publishes again the newest push of a
	// module whose last copy in the stream is older, so that retention, which drops
	// whole old segments, never drops the only copy. DefaultRepublish if 0.
	Republish time.Duration
	Serving   func() map[string]string // the host's serving versions, for heartbeats
	Logger    *slog.Logger
}

// Refusal is a push a host refused.
type Refusal struct {
	Name     string    `json:"name"`
	Version  string    `json:"version,omitempty"`
	Kind     string    `json:"kind"`
	PushedAt time.Time `json:"pushed_at"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// Follower follows the stream for one host.
type Follower struct {
	cfg    Config
	log    *slog.Logger
	jitter time.Duration // this host's share of the re-publish delay: spreads hosts apart

	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the goroutine that reads the stream.
	next    int64             // the offset to read from after a reconnect
	current map[string]*entry // newest push of each name

	mu      sync.Mutex
	refused []Refusal
}

type entry struct {
	push     Push
	lastCopy time.Time // when the newest copy of push was published
}

// Start connects, reads the whole stream up to a marker of its own, writes the newest
// version of each pushed module into cfg.Dir (and removes removed ones), and then follows
// the stream in the background until ctx ends or Close. It returns once caught up, so
// that the registry's first read sees what the fleet serves.
func Start(ctx context.Context, cfg Config) (*Follower, error) {
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Republish <= 0 {
		cfg.Republish = DefaultRepublish
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Follower{cfg: cfg, log: cfg.Logger.With("stream", cfg.Stream), current: map[string]*entry{}, done: make(chan struct{}),
		jitter: time.Duration(mrand.Int64N(int64(cfg.Republish/4) + 1))}
	conn, _, msgs, err := f.subscribe(ctx, "first")
	if err != nil {
		return nil, err
	}
	caught := time.Now()
	if err := f.catchUp(ctx, conn, msgs); err != nil {
		closeConn(conn)
		return nil, err
	}
	for name, e := range f.current {
		f.apply(e.push, name)
	}
	f.log.Info("modules stream read", "pushed_modules", len(f.current), "took", time.Since(caught).Round(time.Millisecond))
	runCtx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	go f.run(runCtx, conn, msgs)
	return f, nil
}

// Close stops following and waits for the goroutine to end, or for ctx to end first
// (a broker that hangs must not hold up the host's shutdown: the connection's close is
// bounded by closeTimeout too).
func (f *Follower) Close(ctx context.Context) {
	f.cancel()
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

// closeTimeout bounds the close handshake of a connection: past it the socket is
// closed without the broker's answer.
const closeTimeout = 2 * time.Second

// closeConn closes conn within closeTimeout, whatever the broker does.
func closeConn(conn *amqp.Connection) {
	conn.CloseDeadline(time.Now().Add(closeTimeout))
}

// Refused lists the pushes this host refused, the newest last.
func (f *Follower) Refused() []Refusal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Refusal{}, f.refused...)
}

func (f *Follower) subscribe(ctx context.Context, offset any) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery, error) {
	conn, err := Dial(ctx, f.cfg.URLs)
	if err != nil {
		return nil, nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { closeConn(conn) })
	defer stop()
	if err := Declare(conn, f.cfg.Stream); err != nil {
		closeConn(conn)
		return nil, nil, nil, err
	}
	ch, msgs, err := consume(conn, f.cfg.Stream, offset)
	if err != nil {
		closeConn(conn)
		return nil, nil, nil, err
	}
	return conn, ch, msgs, nil
}

// catchUp publishes a marker and reads until it comes back.
func (f *Follower) catchUp(ctx context.Context, conn *amqp.Connection, msgs <-chan amqp.Delivery) error {
	id := newMarker()
	if err := publish(ctx, conn, f.cfg.Stream, markerMessage(id)); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("read the modules stream %s: %w", f.cfg.Stream, ctx.Err())
		case d, ok := <-msgs:
			if !ok {
				return fmt.Errorf("read the modules stream %s: the broker closed the channel", f.cfg.Stream)
			}
			if m, _ := d.Headers[hMarker].(string); m == id {
				d.Ack(false)
				return nil
			}
			f.handle(d, true)
		}
	}
}

// handle takes one delivery; a newer push than the current one of its name is applied
// at once unless the follower is catching up.
func (f *Follower) handle(d amqp.Delivery, catchingUp bool) {
	defer d.Ack(false)
	if off, ok := d.Headers["x-stream-offset"].(int64); ok {
		f.next = off + 1
	}
	kind, _ := d.Headers[hKind].(string)
	if kind != KindModule && kind != KindRemove {
		return
	}
	p, err := decodePush(d)
	if err != nil {
		f.refuse(p, err)
		return
	}
	p.Kind = kind
	if f.cfg.TrustKey != nil {
		if err := p.Verify(f.cfg.TrustKey); err != nil {
			f.refuse(p, err)
			return
		}
	}
	copyAt := d.Timestamp
	if copyAt.IsZero() {
		copyAt = time.Now()
	}
	e := f.current[p.Name]
	switch {
	case e != nil && e.push.PushedAt.After(p.PushedAt):
		return // an older push, re-published late
	case e != nil && e.push.PushedAt.Equal(p.PushedAt):
		if copyAt.After(e.lastCopy) { // a copy of the current push
			e.lastCopy = copyAt
		}
		return
	}
	f.current[p.Name] = &entry{push: p, lastCopy: copyAt}
	if !catchingUp {
		f.apply(p, p.Name)
	}
}

func (f *Follower) refuse(p Push, err error) {
	r := Refusal{Name: p.Name, Version: p.Version, Kind: p.Kind, PushedAt: p.PushedAt, Reason: err.Error(), At: time.Now()}
	f.log.Warn("refused a module push", "module", p.Name, "kind", p.Kind, "version", p.Version, "reason", err)
	f.mu.Lock()
	f.refused = append(f.refused, r)
	if len(f.refused) > maxRefusals {
		f.refused = f.refused[len(f.refused)-maxRefusals:]
	}
	f.mu.Unlock()
}

// apply writes or removes a module's files.
func (f *Follower) apply(p Push, name string) {
	var changed bool
	var err error
	if p.Kind == KindRemove {
		changed, err = RemoveModule(f.cfg.Dir, name)
	} else {
		changed, err = WriteModule(f.cfg.Dir, name, p.Manifest, p.Wasm)
	}
	switch {
	case err != nil:
		f.log.Error("writing a pushed module", "module", name, "kind", p.Kind, "error", err)
	case changed:
		f.log.Info("pushed module written", "module", name, "kind", p.Kind, "version", p.Version, "pushed_at", p.PushedAt)
	}
}

// run follows the stream, sends heartbeats and re-publishes, reconnecting when the
// connection goes.
func (f *Follower) run(ctx context.Context, conn *amqp.Connection, msgs <-chan amqp.Delivery) {
	defer close(f.done)
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	beat := time.NewTicker(f.cfg.Heartbeat)
	defer beat.Stop()
	check := time.NewTicker(min(f.cfg.Republish/4+1, time.Minute))
	defer check.Stop()
	f.heartbeat(ctx, conn)
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-msgs:
			if ok {
				f.handle(d, false)
				continue
			}
			f.log.Warn("modules stream lost: reading it again from where it stopped", "offset", f.next)
			closeConn(conn)
			conn, _, msgs = f.resubscribe(ctx)
			if conn == nil {
				return
			}
		case <-beat.C:
			f.heartbeat(ctx, conn)
		case <-check.C:
			f.republish(ctx, conn)
		}
	}
}

// resubscribe connects again and reads from the next offset, pacing its attempts until
// ctx ends (then it returns nils).
func (f *Follower) resubscribe(ctx context.Context) (*amqp.Connection, *amqp.Channel, <-chan amqp.Delivery) {
	wait := 100 * time.Millisecond
	for {
		conn, ch, msgs, err := f.subscribe(ctx, f.next)
		if err == nil {
			f.log.Info("modules stream read again", "offset", f.next)
			return conn, ch, msgs
		}
		f.log.Debug("modules stream: reconnecting", "error", err)
		select {
		case <-ctx.Done():
			return nil, nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (f *Follower) heartbeat(ctx context.Context, conn *amqp.Connection) {
	hb := Heartbeat{Host: f.cfg.HostID, Modules: map[string]string{}, At: time.Now()}
	if f.cfg.Serving != nil {
		hb.Modules = f.cfg.Serving()
	}
	body, _ := json.Marshal(hb)
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	err := publish(ctx, conn, f.cfg.Stream, amqp.Publishing{Headers: amqp.Table{hKind: KindHeartbeat}, Body: body, Timestamp: hb.At})
	if err != nil && !errors.Is(err, context.Canceled) {
		f.log.Debug("modules stream: heartbeat not sent", "error", err)
	}
}

// republish publishes again each newest push whose last copy is older than Republish
// (plus this host's jitter: the first host to do it spares the others, who read its
// copy before their own turn comes).
func (f *Follower) republish(ctx context.Context, conn *amqp.Connection) {
	for name, e := range f.current {
		if time.Since(e.lastCopy) < f.cfg.Republish+f.jitter {
			continue
		}
		msg := e.push.encode()
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		err := publish(pctx, conn, f.cfg.Stream, msg)
		cancel()
		if err != nil {
			f.log.Warn("modules stream: re-publishing a module failed; trying again later", "module", name, "error", err)
			return
		}
		e.lastCopy = msg.Timestamp
		f.log.Info("module re-published to keep it in the stream", "module", name, "kind", e.push.Kind, "version", e.push.Version)
	}
}
