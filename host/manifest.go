package host

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/outbound"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
	"github.com/wasmjobs/wasmjobs/internal/tomlvalue"
)

// Isolation says how a module's jobs share instances.
type Isolation int

const (
	// Pooled jobs run on warm instances, one job at a time each; an instance that
	// failed in any way is discarded.
	Pooled Isolation = iota
	// Fresh jobs each get a new instance, discarded afterwards: no state survives a job.
	Fresh
)

// String returns "pooled" or "fresh".
func (i Isolation) String() string {
	if i == Fresh {
		return "fresh"
	}
	return "pooled"
}

// Limits bound what one job of a module may do. DefaultLimits gives the defaults.
type Limits struct {
	// Timeout is the wall-clock time a job may run.
	Timeout time.Duration
	// MemoryPages bounds the instance's linear memory, in 64 KiB pages.
	MemoryPages uint32
	// MaxPayload bounds the payload a job may have, in bytes.
	MaxPayload int
	// MaxOutput bounds the output a job may write, in bytes.
	MaxOutput int
	// MaxLogMessage truncates each log message, in bytes.
	MaxLogMessage int
	// MaxLogLines bounds the log lines of one job; the rest are dropped and counted.
	MaxLogLines int
	// MaxChildren bounds the child jobs one job may stage.
	MaxChildren int
	// MaxReason truncates the reason, in bytes.
	MaxReason int
}

// DefaultLimits returns the limits of a module whose manifest sets none.
func DefaultLimits() Limits {
	return Limits{
		Timeout:       abi.DefaultTimeoutMs * time.Millisecond,
		MemoryPages:   abi.DefaultMemoryPages,
		MaxPayload:    abi.DefaultMaxPayload,
		MaxOutput:     abi.DefaultMaxOutput,
		MaxLogMessage: abi.DefaultMaxLogMessage,
		MaxLogLines:   abi.DefaultMaxLogLines,
		MaxChildren:   abi.DefaultMaxChildren,
		MaxReason:     abi.DefaultMaxReason,
	}
}

// Mount grants a module read-only access to a host directory.
type Mount struct {
	// Host is the directory on the host.
	Host string
	// Guest is where the module sees it.
	Guest string
}

// Manifest is a module's configuration, read from the sidecar file NAME.toml beside
// NAME.wasm. Every field is optional; the zero value of a field means its default.
type Manifest struct {
	// Queue is the queue the module consumes. Default: the module's name.
	Queue string
	// Enqueue lists the queues the module may enqueue child jobs into. Nil means any;
	// an empty list means none.
	Enqueue []string
	// MaxAttempts is how many executions a job may have. Default: the worker's.
	MaxAttempts int
	// MaxDefers bounds consecutive defers of one job. Default: the worker's.
	MaxDefers int
	// BackoffBase and BackoffCap shape the retry backoff. Default: the worker's.
	BackoffBase, BackoffCap time.Duration
	// Concurrency bounds the module's running jobs. Default: only the worker's bound.
	Concurrency int
	// KeyConcurrency bounds the running jobs of one concurrency key (a job's key),
	// which run in enqueue order, each holding its key until it ends (a retrying job
	// too). Default: no bound. RabbitMQ refuses it.
	KeyConcurrency int
	// WaitTimeout is how long a job of the module that settled WAIT waits for its
	// awaited children: past it, it runs again with those that had not ended marked
	// unfinished. Default: backend.DefaultWaitTimeout (24 h).
	WaitTimeout time.Duration
	// TraceChild makes the process span of each job a child of its enqueue's span
	// (trace_parenting = "child"), rather than the root of a trace of its own that
	// links to it ("link", the default): for queues whose jobs run at once.
	TraceChild bool
	// Isolation is pooled (default) or fresh.
	Isolation Isolation
	// RecycleAfter discards a pooled instance after this many jobs. Zero: never.
	RecycleAfter int
	// Limits bound each job; fields the manifest does not set keep DefaultLimits.
	Limits Limits
	// Env is the environment the module sees. Default: empty.
	Env map[string]string
	// Dirs are host directories the module may read. Default: none.
	Dirs []Mount
	// Rollout is how a new version of the module is put in service ([rollout]).
	Rollout Rollout
	// http is the module's outbound HTTP grant ([http]); nil: no request leaves the
	// sandbox. Unexported, since its type is internal: a manifest sets it in its text,
	// and HTTP shows it.
	http *outbound.Grant

	// RateLimit bounds how fast one host starts the module's jobs (rate, burst).
	// Default: no bound.
	RateLimit RateLimit

	// schedules are the module's periodic jobs ([[schedule]] tables); Schedules
	// returns them. Unexported, since their type is internal: a manifest sets them
	// in its text, never in Go.
	schedules []schedule.Spec
}

// Schedules returns the module's periodic jobs ([[schedule]] tables), each firing
// into the module's queue, in the manifest's order, defaults filled in. Default: none.
// The slice is the caller's: a new one each call.
func (m Manifest) Schedules() []Schedule {
	out := make([]Schedule, len(m.schedules))
	for i, s := range m.schedules {
		out[i] = Schedule{Name: s.Name, Cron: s.Cron.String(), Timezone: s.Cron.Location().String(),
			Payload: slices.Clone(s.Payload), Headers: maps.Clone(s.Headers), Overlap: s.Overlap.String(), CatchUp: s.CatchUp}
	}
	return out
}

// Schedule is one of a module's periodic jobs, a [[schedule]] table of its manifest,
// as the manifest checked it.
type Schedule struct {
	// Name tells the module's schedules apart; with the module's name it names the
	// schedule, its state and its jobs' ids. Default: the cron line.
	Name string
	// Cron is the cron line that says when it fires, read in Timezone (an IANA zone
	// name; default UTC).
	Cron, Timezone string
	// Payload and Headers are every job's.
	Payload []byte
	Headers map[string]string
	// Overlap is "skip" (default: no tick fires while the last tick's job is not
	// finished) or "allow".
	Overlap string
	// CatchUp fires once at start, for the newest tick missed while no host fired;
	// default true.
	CatchUp bool
}

// HTTP returns the module's outbound HTTP grant ([http]) as /v1/modules shows it: the
// headers the host adds are named, never their values. Nil without a grant: no request
// leaves the sandbox.
func (m Manifest) HTTP() *HTTPGrant { return grantView(m.http) }

// ManifestError is a manifest's problem, with where it is.
type ManifestError struct {
	// File is the manifest's path.
	File string
	// Line and Column are the 1-based position at fault, 0 when the problem is the
	// whole file (or, for Column, not known).
	Line, Column int
	// Field is the field at fault, if any, as a dotted TOML key ("env.TZ").
	Field string
	// Problem says what is wrong.
	Problem string
}

// Error implements error: "file:line:column: field F: problem".
func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Problem)
	return b.String()
}

// ManifestPath returns the manifest's path for the module file wasmPath: the same
// name with the extension .toml.
func ManifestPath(wasmPath string) string {
	return strings.TrimSuffix(wasmPath, filepath.Ext(wasmPath)) + ".toml"
}

// ReadManifest reads the manifest of the module file wasmPath. A missing manifest is
// not an error: it yields the defaults.
func ReadManifest(wasmPath string) (Manifest, error) {
	path := ManifestPath(wasmPath)
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ParseManifest(path, nil)
	}
	if err != nil {
		return Manifest{}, &ManifestError{File: path, Problem: err.Error()}
	}
	return ParseManifest(path, data)
}

// manifestDoc is a manifest's TOML document: the keys it may have. Each field is
// decoded as whatever TOML value it holds and checked by its manifestFields entry,
// so that a value of the wrong type gets a message of ours, with its position.
// New settings that group several fields get a table here.
type manifestDoc struct {
	Queue          any `toml:"queue"`
	Enqueue        any `toml:"enqueue"`
	MaxAttempts    any `toml:"max_attempts"`
	MaxDefers      any `toml:"max_defers"`
	BackoffBase    any `toml:"backoff_base"`
	BackoffCap     any `toml:"backoff_cap"`
	Concurrency    any `toml:"concurrency"`
	KeyConcurrency any `toml:"key_concurrency"`
	WaitTimeout    any `toml:"wait_timeout"`
	TraceParenting any `toml:"trace_parenting"`
	Isolation      any `toml:"isolation"`
	RecycleAfter   any `toml:"recycle_after"`
	Timeout        any `toml:"timeout"`
	Memory         any `toml:"memory"`
	MaxPayload     any `toml:"max_payload"`
	MaxOutput      any `toml:"max_output"`
	MaxLogMessage  any `toml:"max_log_message"`
	MaxLogLines    any `toml:"max_log_lines"`
	MaxChildren    any `toml:"max_children"`
	MaxReason      any `toml:"max_reason"`
	Env            any `toml:"env"`
	Dirs           any `toml:"dirs"`
	Rollout        any `toml:"rollout"`
	HTTP           any `toml:"http"`

	Rate     any `toml:"rate"`
	Burst    any `toml:"burst"`
	Schedule any `toml:"schedule"`
}

// value is a field's decoded TOML value, with its text as written for messages.
type value struct {
	v   any
	raw string
}

// manifestField checks one field's value and sets it in m. A problem with one entry
// of a table returns an *entryError naming the entry.
type manifestField func(m *Manifest, v value) error

// entryError is a problem with the entry key of a table field.
type entryError struct {
	key string
	err error
}

func (e *entryError) Error() string { return e.err.Error() }

var manifestFields = map[string]manifestField{
	"rollout": parseRollout,
	"http":    parseHTTP,
	"queue": func(m *Manifest, v value) (err error) {
		if m.Queue, err = v.str(); err != nil {
			return err
		}
		return backend.ValidateQueueName(m.Queue)
	},
	"enqueue": func(m *Manifest, v value) error {
		list, err := v.list()
		if err != nil {
			return err
		}
		for _, q := range list {
			if err := backend.ValidateQueueName(q); err != nil {
				return err
			}
		}
		m.Enqueue = list
		return nil
	},
	"max_attempts":    intField(func(m *Manifest) *int { return &m.MaxAttempts }, 1, 1_000_000),
	"max_defers":      intField(func(m *Manifest) *int { return &m.MaxDefers }, 1, 1_000_000),
	"concurrency":     intField(func(m *Manifest) *int { return &m.Concurrency }, 1, 100_000),
	"recycle_after":   intField(func(m *Manifest) *int { return &m.RecycleAfter }, 1, 1<<31-1),
	"backoff_base":    durationField(func(m *Manifest) *time.Duration { return &m.BackoffBase }),
	"backoff_cap":     durationField(func(m *Manifest) *time.Duration { return &m.BackoffCap }),
	"timeout":         durationField(func(m *Manifest) *time.Duration { return &m.Limits.Timeout }),
	"key_concurrency": intField(func(m *Manifest) *int { return &m.KeyConcurrency }, 1, 100_000),
	"wait_timeout":    durationFieldUpTo(func(m *Manifest) *time.Duration { return &m.WaitTimeout }, "720h", maxWaitTimeout),
	"trace_parenting": choiceField("link", "child", func(m *Manifest, child bool) { m.TraceChild = child }),
	"isolation": choiceField("pooled", "fresh", func(m *Manifest, fresh bool) {
		m.Isolation = Pooled
		if fresh {
			m.Isolation = Fresh
		}
	}),
	"memory": func(m *Manifest, v value) error {
		n, err := v.size()
		if err != nil {
			return err
		}
		pages := (n + 65535) / 65536
		if pages < 1 || pages > 65536 {
			return fmt.Errorf("want 64KiB to 4GiB, got %s", v.raw)
		}
		m.Limits.MemoryPages = uint32(pages)
		return nil
	},
	"max_payload":     sizeField(func(m *Manifest) *int { return &m.Limits.MaxPayload }),
	"max_output":      sizeField(func(m *Manifest) *int { return &m.Limits.MaxOutput }),
	"max_log_message": sizeField(func(m *Manifest) *int { return &m.Limits.MaxLogMessage }),
	"max_reason":      sizeField(func(m *Manifest) *int { return &m.Limits.MaxReason }),
	"max_log_lines":   intField(func(m *Manifest) *int { return &m.Limits.MaxLogLines }, 0, 1_000_000),
	"max_children":    intField(func(m *Manifest) *int { return &m.Limits.MaxChildren }, 0, 100_000),
	"env": func(m *Manifest, v value) error {
		table, ok := v.v.(map[string]any)
		if !ok {
			return fmt.Errorf("want a table of NAME = \"value\" entries, such as [env] then TZ = \"UTC\", got %s", v.raw)
		}
		m.Env = make(map[string]string, len(table))
		for _, k := range slices.Sorted(maps.Keys(table)) {
			s, ok := table[k].(string)
			if !ok {
				return &entryError{key: k, err: fmt.Errorf("want a string, got %s", tomlvalue.Describe(table[k]))}
			}
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return &entryError{key: k, err: fmt.Errorf("want a variable name without '=', got %q", k)}
			}
			m.Env[k] = s
		}
		return nil
	},
	"rate":     parseRate,
	"burst":    intField(func(m *Manifest) *int { return &m.RateLimit.Burst }, 1, maxBurst),
	"schedule": parseSchedules,
	"dirs": func(m *Manifest, v value) error {
		list, err := v.list()
		if err != nil {
			return err
		}
		m.Dirs = nil
		for _, d := range list {
			h, g, ok := strings.Cut(d, ":")
			if !ok || !filepath.IsAbs(h) || !strings.HasPrefix(g, "/") {
				return fmt.Errorf("want \"/host/dir:/guest/dir\" entries with absolute paths, got %q", d)
			}
			m.Dirs = append(m.Dirs, Mount{Host: h, Guest: g})
		}
		return nil
	},
}

// ManifestFields lists the fields a manifest may set, sorted.
func ManifestFields() []string {
	return slices.Sorted(maps.Keys(manifestFields))
}

// choiceField decodes a string that is one of two words, and sets the second or not.
func choiceField(first, second string, set func(m *Manifest, second bool)) manifestField {
	return func(m *Manifest, v value) error {
		s, err := v.str()
		if err != nil {
			return err
		}
		if s != first && s != second {
			return fmt.Errorf("want %q or %q, got %s", first, second, v.raw)
		}
		set(m, s == second)
		return nil
	}
}

func intField(field func(*Manifest) *int, lo, hi int) manifestField {
	return func(m *Manifest, v value) error {
		n, ok := v.v.(int64)
		if !ok {
			return fmt.Errorf("want a whole number, got %s", v.raw)
		}
		if n < int64(lo) || n > int64(hi) {
			return fmt.Errorf("want %d to %d, got %s", lo, hi, v.raw)
		}
		*field(m) = int(n)
		return nil
	}
}

// maxWaitTimeout is the longest wait_timeout: 30 days.
const maxWaitTimeout = 720 * time.Hour

func durationField(field func(*Manifest) *time.Duration) manifestField {
	return durationFieldUpTo(field, "24h", 24*time.Hour)
}

// durationFieldUpTo is a duration from 1ms to most, which a message names as name.
func durationFieldUpTo(field func(*Manifest) *time.Duration, name string, most time.Duration) manifestField {
	return func(m *Manifest, v value) error {
		s, ok := v.v.(string)
		d, err := time.ParseDuration(s)
		if !ok || err != nil || d <= 0 || d > most {
			return fmt.Errorf("want a duration from 1ms to %s such as \"30s\", got %s", name, v.raw)
		}
		*field(m) = d
		return nil
	}
}

func sizeField(field func(*Manifest) *int) manifestField {
	return func(m *Manifest, v value) error {
		n, err := v.size()
		if err != nil {
			return err
		}
		if n < 0 || n > 1<<30 {
			return fmt.Errorf("want 0 to 1GiB, got %s", v.raw)
		}
		*field(m) = n
		return nil
	}
}

func (v value) str() (string, error) {
	s, ok := v.v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %s", v.raw)
	}
	return s, nil
}

// size parses a whole number of bytes, or a string with a unit: "64KiB", "1MiB", "2GiB",
// "512B".
func (v value) size() (int, error) {
	switch x := v.v.(type) {
	case int64:
		if x < 0 || x > 1<<40 {
			return 0, fmt.Errorf("want 0 to 1TiB, got %s", v.raw)
		}
		return int(x), nil
	case string:
		units := []struct {
			suffix string
			mult   int
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
		for _, u := range units {
			if num, ok := strings.CutSuffix(x, u.suffix); ok {
				n, err := strconv.Atoi(strings.TrimSpace(num))
				if err == nil && n >= 0 && n <= (1<<40)/u.mult {
					return n * u.mult, nil
				}
				break
			}
		}
	}
	return 0, fmt.Errorf("want a size such as \"64KiB\", \"1MiB\" or a number of bytes, got %s", v.raw)
}

// list returns an array of strings.
func (v value) list() ([]string, error) {
	arr, ok := v.v.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of strings such as [\"a\", \"b\"], got %s", v.raw)
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("want an array of strings, got %s in it", tomlvalue.Describe(e))
		}
		out = append(out, s)
	}
	return out, nil
}

// ParseManifest parses a manifest's TOML text; file names it in errors. The document
// is TOML v1.0 (go-toml/v2), decoded strictly: a key that is not a field is an error.
// Each field's value is then checked; every error is a *ManifestError with the line
// and column of the key at fault.
func ParseManifest(file string, data []byte) (Manifest, error) {
	var doc manifestDoc
	if err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(&doc); err != nil {
		return Manifest{}, decodeError(file, err)
	}
	pos := keyPositions(data)
	fail := func(field string, err error) (Manifest, error) {
		var ee *entryError
		if errors.As(err, &ee) {
			field += "." + ee.key
		}
		p := pos.of(field)
		return Manifest{}, &ManifestError{File: file, Line: p.line, Column: p.col, Field: field, Problem: err.Error()}
	}
	m := Manifest{Limits: DefaultLimits()}
	rv, rt := reflect.ValueOf(doc), reflect.TypeFor[manifestDoc]()
	for i := range rt.NumField() {
		v := rv.Field(i).Interface()
		if v == nil {
			continue
		}
		name := rt.Field(i).Tag.Get("toml")
		parse, ok := manifestFields[name]
		if !ok {
			return fail(name, errors.New("no check for this field (a bug in wasmjobs)"))
		}
		if err := parse(&m, value{v: v, raw: pos.of(name).raw}); err != nil {
			return fail(name, err)
		}
	}
	if m.BackoffBase > 0 && m.BackoffCap > 0 && m.BackoffCap < m.BackoffBase {
		return fail("backoff_cap", fmt.Errorf("%v is below backoff_base %v", m.BackoffCap, m.BackoffBase))
	}
	if err := m.RateLimit.check(); err != nil {
		return fail("burst", err)
	}
	if field, err := checkSchedules(m); err != nil {
		return fail(field, err)
	}
	return m, nil
}

// decodeError turns go-toml's errors into a ManifestError. Their messages carry no
// position, so it comes from their Position methods.
func decodeError(file string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		first := strict.Errors[0]
		line, col := first.Position()
		problem := fmt.Sprintf("unknown field (known: %s)", strings.Join(ManifestFields(), ", "))
		if more := strict.Errors[1:]; len(more) > 0 {
			others := make([]string, len(more))
			for i, e := range more {
				l, _ := e.Position()
				others[i] = fmt.Sprintf("%s (line %d)", strings.Join(e.Key(), "."), l)
			}
			problem += "; also unknown: " + strings.Join(others, ", ")
		}
		return &ManifestError{File: file, Line: line, Column: col, Field: strings.Join(first.Key(), "."), Problem: problem}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		return &ManifestError{File: file, Line: line, Column: col, Field: strings.Join(de.Key(), "."),
			Problem: "invalid TOML: " + strings.TrimPrefix(de.Error(), "toml: ")}
	}
	return &ManifestError{File: file, Problem: err.Error()}
}

// position is where a key of the document is, and its value's text as written.
type position struct {
	line, col int
	raw       string
}

// positions maps the dotted keys of a document ("queue", "env", "env.TZ") to where
// they are.
type positions map[string]position

// of returns the position of key, or of the nearest enclosing key that has one.
func (p positions) of(key string) position {
	for {
		if at, ok := p[key]; ok {
			return at
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return position{}
		}
		key = key[:i]
	}
}

// keyPositions indexes the keys of a document that go-toml decoded without error,
// with go-toml's own parser, for the messages of the checks made after decoding.
func keyPositions(data []byte) positions {
	out := positions{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	arrays := map[string]int{} // entries of each array of tables so far
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = table[:0]
			it := e.Key()
			var first *unstable.Node
			for it.Next() {
				if first == nil {
					first = it.Node()
				}
				table = append(table, string(it.Node().Data))
			}
			if first == nil {
				continue
			}
			key := strings.Join(table, ".")
			at := p.Shape(first.Raw).Start
			if _, seen := out[key]; !seen {
				out[key] = position{line: at.Line, col: at.Column, raw: "a table"}
			}
			if e.Kind == unstable.ArrayTable {
				// The keys of the Nth entry of [[key]] are indexed as "key.N.field"
				// (0-based), so that a message names the entry's own line.
				n := arrays[key]
				arrays[key]++
				table = append(table, strconv.Itoa(n))
				out[strings.Join(table, ".")] = position{line: at.Line, col: at.Column, raw: "a table"}
			}
		case unstable.KeyValue:
			path := slices.Clone(table)
			it := e.Key()
			var first, last *unstable.Node
			for it.Next() {
				if first == nil {
					first = it.Node()
				}
				last = it.Node()
				path = append(path, string(it.Node().Data))
			}
			if first == nil {
				continue
			}
			at := p.Shape(first.Raw).Start
			kv := p.Raw(e.Raw)
			keyEnd := int(last.Raw.Offset+last.Raw.Length) - int(e.Raw.Offset)
			raw := strings.TrimSpace(string(kv[min(max(keyEnd, 0), len(kv)):]))
			raw = strings.TrimSpace(strings.TrimPrefix(raw, "="))
			out[strings.Join(path, ".")] = position{line: at.Line, col: at.Column, raw: raw}
		}
	}
	return out
}

// RateLimit is a module's rate limit: how fast one host starts the jobs of its queue.
// It is per host: N hosts serving the queue start up to N times PerSecond between
// them, so a limit meant for all of them is divided by N in each host's manifest.
type RateLimit struct {
	// PerSecond is the most jobs a second one host starts (the manifest's rate,
	// "50/s", "600/m" or "10/h", at least 1/h); zero means no limit.
	PerSecond float64
	// Burst is the size of the token bucket (the manifest's burst): after an idle
	// spell up to Burst jobs may start at once, then one each 1/PerSecond. Zero means
	// 1: jobs evenly spaced.
	Burst int
}

// Bounds of a rate limit.
const (
	maxRatePerSecond = 1_000_000
	minRatePerSecond = 1.0 / 3600
	maxBurst         = 1_000_000
)

// parseRate reads rate = "N/s", "N/m" or "N/h": N jobs a second, a minute or an hour,
// N a positive number (a fraction such as "0.5/s" is allowed), the rate from one job
// an hour to maxRatePerSecond.
func parseRate(m *Manifest, v value) error {
	s, ok := v.v.(string)
	num, unit, cut := strings.Cut(s, "/")
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[strings.TrimSpace(unit)]
	if !ok || !cut || per == 0 {
		return fmt.Errorf("want a rate such as \"50/s\" (jobs a second), \"600/m\" (jobs a minute) or \"10/h\" (jobs an hour), got %s", v.raw)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n <= 0 || n/per > maxRatePerSecond || n != n {
		return fmt.Errorf("want a positive number of jobs up to %d a second before the \"/\", got %s", maxRatePerSecond, v.raw)
	}
	// A slower rate is a typo or a schedule in disguise (use [[schedule]]), and its
	// waits outgrow what a limiter can express.
	if n/per < minRatePerSecond {
		return fmt.Errorf("rate %s is below the least, one job an hour (\"1/h\")", v.raw)
	}
	m.RateLimit.PerSecond = n / per
	return nil
}

// check refuses a burst without a rate: it would bound nothing.
func (r RateLimit) check() error {
	if r.Burst > 0 && r.PerSecond == 0 {
		return errors.New("burst is set without rate: set rate = \"N/s\" or \"N/m\" too, or remove burst")
	}
	return nil
}
