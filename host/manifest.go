package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmjobs/wasmjobs/abi"
	"github.com/wasmjobs/wasmjobs/backend"
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
}

// ManifestError is a manifest's problem, with where it is.
type ManifestError struct {
	// File is the manifest's path.
	File string
	// Line is the 1-based line at fault, 0 when the problem is the whole file.
	Line int
	// Field is the field at fault, if any.
	Field string
	// Problem says what is wrong.
	Problem string
}

// Error implements error.
func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
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

// manifestField parses one field's value into m.
type manifestField func(m *Manifest, v value) error

var manifestFields = map[string]manifestField{
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
	"max_attempts":  intField(func(m *Manifest) *int { return &m.MaxAttempts }, 1, 1_000_000),
	"max_defers":    intField(func(m *Manifest) *int { return &m.MaxDefers }, 1, 1_000_000),
	"concurrency":   intField(func(m *Manifest) *int { return &m.Concurrency }, 1, 100_000),
	"recycle_after": intField(func(m *Manifest) *int { return &m.RecycleAfter }, 1, 1<<31-1),
	"backoff_base":  durationField(func(m *Manifest) *time.Duration { return &m.BackoffBase }),
	"backoff_cap":   durationField(func(m *Manifest) *time.Duration { return &m.BackoffCap }),
	"timeout":       durationField(func(m *Manifest) *time.Duration { return &m.Limits.Timeout }),
	"isolation": func(m *Manifest, v value) error {
		s, err := v.str()
		if err != nil {
			return err
		}
		switch s {
		case "pooled":
			m.Isolation = Pooled
		case "fresh":
			m.Isolation = Fresh
		default:
			return fmt.Errorf("want \"pooled\" or \"fresh\", got %q", s)
		}
		return nil
	},
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
		list, err := v.list()
		if err != nil {
			return err
		}
		m.Env = make(map[string]string, len(list))
		for _, kv := range list {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("want \"NAME=value\" entries, got %q", kv)
			}
			m.Env[k] = val
		}
		return nil
	},
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
	var names []string
	for k := range manifestFields {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func intField(field func(*Manifest) *int, lo, hi int) manifestField {
	return func(m *Manifest, v value) error {
		n, err := v.integer()
		if err != nil {
			return err
		}
		if n < lo || n > hi {
			return fmt.Errorf("want %d to %d, got %d", lo, hi, n)
		}
		*field(m) = n
		return nil
	}
}

func durationField(field func(*Manifest) *time.Duration) manifestField {
	return func(m *Manifest, v value) error {
		s, err := v.str()
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > 24*time.Hour {
			return fmt.Errorf("want a duration from 1ms to 24h such as \"30s\", got %q", s)
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

// ParseManifest parses a manifest's text; file names it in errors. The format is a
// subset of TOML: one `key = value` per line, values being "strings", whole numbers, or
// one-line ["lists", "of strings"]; `#` starts a comment.
func ParseManifest(file string, data []byte) (Manifest, error) {
	m := Manifest{Limits: DefaultLimits()}
	seen := make(map[string]int)
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		fail := func(field, format string, args ...any) (Manifest, error) {
			return Manifest{}, &ManifestError{File: file, Line: n, Field: field, Problem: fmt.Sprintf(format, args...)}
		}
		line = strings.TrimSpace(stripComment(line))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			return fail("", "sections are not supported: every field is at the top level")
		}
		key, raw, ok := strings.Cut(line, "=")
		key, raw = strings.TrimSpace(key), strings.TrimSpace(raw)
		if !ok || key == "" {
			return fail("", "want `field = value`, got %q", line)
		}
		parse, known := manifestFields[key]
		if !known {
			return fail(key, "unknown field (known: %s)", strings.Join(ManifestFields(), ", "))
		}
		if prev, dup := seen[key]; dup {
			return fail(key, "set twice (first on line %d)", prev)
		}
		seen[key] = n
		if raw == "" {
			return fail(key, "no value")
		}
		if err := parse(&m, value{raw: raw}); err != nil {
			return fail(key, "%v", err)
		}
	}
	if m.BackoffBase > 0 && m.BackoffCap > 0 && m.BackoffCap < m.BackoffBase {
		return Manifest{}, &ManifestError{File: file, Line: seen["backoff_cap"], Field: "backoff_cap",
			Problem: fmt.Sprintf("%v is below backoff_base %v", m.BackoffCap, m.BackoffBase)}
	}
	return m, nil
}

// stripComment removes a # comment that is not inside a string.
func stripComment(line string) string {
	inString, escaped := false, false
	for i, c := range line {
		switch {
		case escaped:
			escaped = false
		case c == '\\' && inString:
			escaped = true
		case c == '"':
			inString = !inString
		case c == '#' && !inString:
			return line[:i]
		}
	}
	return line
}

// value is a field's raw value text.
type value struct{ raw string }

func (v value) str() (string, error) {
	if !strings.HasPrefix(v.raw, `"`) {
		return "", fmt.Errorf("want a \"quoted string\", got %s", v.raw)
	}
	s, err := strconv.Unquote(v.raw)
	if err != nil {
		return "", fmt.Errorf("bad string %s: want a \"quoted string\" with \\\" and \\\\ escapes", v.raw)
	}
	return s, nil
}

func (v value) integer() (int, error) {
	n, err := strconv.ParseInt(strings.ReplaceAll(v.raw, "_", ""), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a whole number, got %s", v.raw)
	}
	return int(n), nil
}

// size parses a whole number of bytes, or a string with a unit: "64KiB", "1MiB", "2GiB",
// "512B".
func (v value) size() (int, error) {
	if !strings.HasPrefix(v.raw, `"`) {
		return v.integer()
	}
	s, err := v.str()
	if err != nil {
		return 0, err
	}
	units := []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.Atoi(strings.TrimSpace(num))
			if err == nil && n >= 0 && n <= (1<<40)/u.mult {
				return n * u.mult, nil
			}
			break
		}
	}
	return 0, fmt.Errorf("want a size such as \"64KiB\", \"1MiB\" or a number of bytes, got %s", v.raw)
}

func (v value) list() ([]string, error) {
	if !strings.HasPrefix(v.raw, "[") || !strings.HasSuffix(v.raw, "]") {
		return nil, fmt.Errorf("want a one-line [\"list\", \"of strings\"], got %s", v.raw)
	}
	inner := strings.TrimSpace(v.raw[1 : len(v.raw)-1])
	out := []string{}
	for inner != "" {
		if !strings.HasPrefix(inner, `"`) {
			return nil, fmt.Errorf("want a one-line [\"list\", \"of strings\"], got %s", v.raw)
		}
		end := closingQuote(inner)
		if end < 0 {
			return nil, fmt.Errorf("unterminated string in %s", v.raw)
		}
		s, err := strconv.Unquote(inner[:end+1])
		if err != nil {
			return nil, fmt.Errorf("bad string %s in %s", inner[:end+1], v.raw)
		}
		out = append(out, s)
		inner = strings.TrimSpace(inner[end+1:])
		if inner != "" {
			rest, ok := strings.CutPrefix(inner, ",")
			if !ok {
				return nil, fmt.Errorf("want commas between the strings of %s", v.raw)
			}
			inner = strings.TrimSpace(rest)
		}
	}
	return out, nil
}

// closingQuote returns the index of the quote closing the string that s starts with.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
