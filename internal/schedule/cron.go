// Package schedule fires periodic jobs: given schedules (a cron line, a payload, a
// queue) and a store that keeps the last fired tick of each, it publishes one job per
// tick, with an id derived from the schedule and the tick, so that every host and every
// restart agrees on what a tick is and which job it made. It knows nothing of
// WebAssembly or of which host should fire: the caller hands it a store once this host
// may fire (at once on a single-host backend, once it leads on a shared one).
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalid is wrapped by every error of ParseCron.
var ErrInvalid = errors.New("invalid schedule")

// parser reads the standard five fields (minute, hour, day of month, month, day of
// week) and the descriptors (@hourly, @daily, @every 5m, ...). Seconds are not a field:
// the smallest cron period is a minute, and @every gives whole seconds.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a parsed cron line: when a schedule fires.
type Cron struct {
	line  string
	every time.Duration // @every: ticks at whole multiples since the Unix epoch
	spec  cron.Schedule // the rest, in loc
	loc   *time.Location
}

// ParseCron parses line in timezone (an IANA name such as "Europe/Berlin"; empty means
// UTC, so that every host computes the same ticks whatever its local zone). It
// refuses what robfig/cron would silently change or what could never fire:
// CRON_TZ= and TZ= prefixes (the timezone field is the one way to set a zone),
// @every below a second or with a fraction of a second (robfig rounds them), and a
// line that never matches a date (such as "0 0 30 2 *"). Errors wrap ErrInvalid and
// say why.
func ParseCron(line, timezone string) (Cron, error) {
	line = strings.TrimSpace(line)
	fail := func(format string, args ...any) (Cron, error) {
		return Cron{}, fmt.Errorf("%w: cron %q: %s", ErrInvalid, line, fmt.Sprintf(format, args...))
	}
	if line == "" {
		return fail("empty: want five fields such as \"*/5 * * * *\", or @hourly, @daily, @every 10m")
	}
	if strings.HasPrefix(line, "CRON_TZ=") || strings.HasPrefix(line, "TZ=") {
		return fail("a zone prefix is not taken here: set timezone = \"Area/City\" beside cron")
	}
	loc := time.UTC
	if timezone != "" {
		l, err := time.LoadLocation(timezone)
		if err != nil || timezone == "Local" {
			return fail("timezone %q: not an IANA zone name such as \"Europe/Berlin\"", timezone)
		}
		loc = l
	}
	if rest, ok := strings.CutPrefix(line, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return fail("want a duration after @every such as \"@every 5m\"")
		case d < time.Second:
			return fail("@every %v is below a second: the smallest interval is 1s", d)
		case d%time.Second != 0:
			return fail("@every %v is not a whole number of seconds", d)
		}
		return Cron{line: line, every: d, loc: loc}, nil
	}
	spec, err := parser.Parse(line)
	if err != nil {
		return fail("%v", err)
	}
	if s, ok := spec.(*cron.SpecSchedule); ok {
		s.Location = loc
	}
	c := Cron{line: line, spec: spec, loc: loc}
	// robfig gives up after five years without a match and returns the zero time: a
	// day that does not exist (30 February, 31 April) never fires. Five years cover
	// every leap day.
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return fail("it never fires: no date matches it (a day that the month does not have?)")
	}
	return c, nil
}

// String returns the line as written.
func (c Cron) String() string { return c.line }

// Location returns the zone the line is read in.
func (c Cron) Location() *time.Location { return c.loc }

// IsZero reports whether c was never parsed.
func (c Cron) IsZero() bool { return c.line == "" }

// Next returns the first tick strictly after t, or the zero time if there is none.
// @every ticks are the whole multiples of the interval since the Unix epoch, so they
// do not depend on when a host started. Cron ticks follow robfig/cron in the line's
// zone; across a daylight-saving change a wall-clock time that does not exist that day
// does not fire, and one that exists twice fires twice, an hour apart (see the
// README). The tick is in t's location.
func (c Cron) Next(t time.Time) time.Time {
	if c.every > 0 {
		n := t.UnixNano()
		d := c.every.Nanoseconds()
		next := (n/d + 1) * d
		if n < 0 && n%d != 0 {
			next = (n / d) * d
		}
		return time.Unix(0, next).In(t.Location())
	}
	if c.spec == nil {
		return time.Time{}
	}
	return c.spec.Next(t)
}

// Latest returns the last tick in (after, upTo]; ok is false when there is none. It
// searches backwards in growing windows, so a host down for a year with a
// once-a-minute schedule does not walk every minute of it from the start.
func (c Cron) Latest(after, upTo time.Time) (tick time.Time, ok bool) {
	if !upTo.After(after) {
		return time.Time{}, false
	}
	for window := time.Hour; window > 0; window *= 2 { // ends if it overflows: after is centuries back
		from := upTo.Add(-window)
		if from.Before(after) {
			from = after
		}
		var last time.Time
		for t := c.Next(from); !t.IsZero() && !t.After(upTo); t = c.Next(t) {
			last = t
		}
		if !last.IsZero() {
			return last, true
		}
		if !from.After(after) {
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}
