package host

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/wasmjobs/wasmjobs/internal/jobspec"
	"github.com/wasmjobs/wasmjobs/internal/schedule"
	"github.com/wasmjobs/wasmjobs/internal/tomlvalue"
)

// scheduleKeys are the keys of a [[schedule]] table.
var scheduleKeys = []string{"catch_up", "cron", "headers", "name", "overlap", "payload", "timezone"}

// maxScheduleName bounds a schedule's name, which is part of its key in the store.
const maxScheduleName = 200

// parseSchedules reads the [[schedule]] tables:
//
//	[[schedule]]
//	name = "nightly"            # optional; default: the cron line
//	cron = "0 3 * * *"          # five fields, @hourly..., or "@every 10m"
//	timezone = "Europe/Berlin"  # optional; default UTC
//	payload = '{"report": "daily"}'
//	headers = { source = "cron" }
//	overlap = "skip"            # or "allow"
//	catch_up = true             # or false
//
// A problem names the entry and its key ("schedule.1.cron"), at that key's line.
func parseSchedules(m *Manifest, v value) error {
	list, ok := v.v.([]any)
	if !ok {
		return fmt.Errorf("want [[schedule]] tables, each with a cron line, got %s", v.raw)
	}
	m.schedules = nil
	names := map[string]int{}
	for i, e := range list {
		table, ok := e.(map[string]any)
		if !ok {
			return &entryError{key: strconv.Itoa(i), err: fmt.Errorf("want a [[schedule]] table, got %s", tomlvalue.Describe(e))}
		}
		spec, key, err := parseSchedule(table)
		if err != nil {
			k := strconv.Itoa(i)
			if key != "" {
				k += "." + key
			}
			return &entryError{key: k, err: err}
		}
		if j, dup := names[spec.Name]; dup {
			return &entryError{key: strconv.Itoa(i), err: fmt.Errorf("schedule %d has the name %q too: give each a distinct name = \"...\"", j, spec.Name)}
		}
		names[spec.Name] = i
		m.schedules = append(m.schedules, spec)
	}
	return nil
}

// parseSchedule reads one [[schedule]] table; on error it names the key at fault.
func parseSchedule(t map[string]any) (spec schedule.Spec, key string, err error) {
	for _, k := range slices.Sorted(maps.Keys(t)) {
		if !slices.Contains(scheduleKeys, k) {
			return spec, k, fmt.Errorf("unknown key (known: %s)", strings.Join(scheduleKeys, ", "))
		}
	}
	str := func(k string) (string, error) {
		x, ok := t[k]
		if !ok {
			return "", nil
		}
		s, ok := x.(string)
		if !ok {
			return "", fmt.Errorf("want a string, got %s", tomlvalue.Describe(x))
		}
		return s, nil
	}
	line, err := str("cron")
	if err != nil {
		return spec, "cron", err
	}
	if _, ok := t["cron"]; !ok {
		return spec, "", errors.New("cron is required, such as cron = \"*/5 * * * *\"")
	}
	tz, err := str("timezone")
	if err != nil {
		return spec, "timezone", err
	}
	if spec.Cron, err = schedule.ParseCron(line, tz); err != nil {
		return spec, "cron", err
	}
	spec.Name = strings.TrimSpace(line)
	if _, ok := t["name"]; ok {
		if spec.Name, err = str("name"); err != nil {
			return spec, "name", err
		}
		if spec.Name == "" || len(spec.Name) > maxScheduleName || strings.ContainsFunc(spec.Name, unicode.IsControl) {
			return spec, "name", fmt.Errorf("want a name of 1 to %d printable characters, got %q", maxScheduleName, spec.Name)
		}
	}
	payload, err := str("payload")
	if err != nil {
		return spec, "payload", err
	}
	if payload != "" {
		spec.Payload = []byte(payload)
	}
	if h, ok := t["headers"]; ok {
		table, ok := h.(map[string]any)
		if !ok {
			return spec, "headers", fmt.Errorf("want a table of name = \"value\", got %s", tomlvalue.Describe(h))
		}
		spec.Headers = make(map[string]string, len(table))
		for _, k := range slices.Sorted(maps.Keys(table)) {
			s, ok := table[k].(string)
			switch {
			case !ok:
				return spec, "headers." + k, fmt.Errorf("want a string, got %s", tomlvalue.Describe(table[k]))
			case k == "":
				return spec, "headers", errors.New("empty header name")
			case strings.HasPrefix(k, jobspec.ReservedHeaderPrefix):
				return spec, "headers." + k, fmt.Errorf("the prefix %s is reserved", jobspec.ReservedHeaderPrefix)
			}
			spec.Headers[k] = s
		}
	}
	switch o, err := str("overlap"); {
	case err != nil:
		return spec, "overlap", err
	case o == "" || o == "skip":
		spec.Overlap = schedule.OverlapSkip
	case o == "allow":
		spec.Overlap = schedule.OverlapAllow
	default:
		return spec, "overlap", fmt.Errorf("want \"skip\" or \"allow\", got %q", o)
	}
	spec.CatchUp = true
	if c, ok := t["catch_up"]; ok {
		if spec.CatchUp, ok = c.(bool); !ok {
			return spec, "catch_up", fmt.Errorf("want true or false, got %s", tomlvalue.Describe(c))
		}
	}
	return spec, "", nil
}

// checkSchedules checks what depends on other fields: each payload fits the module's
// max_payload. It returns the field at fault.
func checkSchedules(m Manifest) (string, error) {
	for i, s := range m.schedules {
		if len(s.Payload) > m.Limits.MaxPayload {
			return fmt.Sprintf("schedule.%d.payload", i), fmt.Errorf("payload of %d bytes passes max_payload %d", len(s.Payload), m.Limits.MaxPayload)
		}
	}
	return "", nil
}
