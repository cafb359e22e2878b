package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/schedule"
)

func TestParseCronRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct{ line, tz, reason string }{
		{"", "", "empty"},
		{"0 0 30 2 *", "", "never fires"},
		{"0 0 31 4 *", "", "never fires"},
		{"CRON_TZ=Europe/Berlin 0 3 * * *", "", "timezone ="},
		{"TZ=UTC 0 3 * * *", "", "timezone ="},
		{"@every 500ms", "", "below a second"},
		{"@every 1500ms", "", "whole number of seconds"},
		{"@every soon", "", "duration after @every"},
		{"* * * *", "", "expected exactly 5 fields"},
		{"0 * * * * *", "", "expected exactly 5 fields"},
		{"61 * * * *", "", "above maximum"},
		{"@fortnightly", "", "unrecognized descriptor"},
		{"0 3 * * *", "Mars/Olympus", "not an IANA zone"},
		{"0 3 * * *", "Local", "not an IANA zone"},
	}
	for _, c := range cases {
		_, err := schedule.ParseCron(c.line, c.tz)
		if err == nil {
			t.Errorf("ParseCron(%q, %q) = nil error, want one saying %q", c.line, c.tz, c.reason)
			continue
		}
		if !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), c.line) {
			t.Errorf("ParseCron(%q, %q) = %v, want ErrInvalid naming the line and saying %q", c.line, c.tz, err, c.reason)
		}
	}
}

func TestParseCronAccepts(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 10, 7, 0, 0, time.UTC)
	cases := []struct {
		line, tz string
		next     time.Time
	}{
		{"*/1 * * * *", "", at.Add(time.Minute)},
		{"@hourly", "", time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)},
		{"@daily", "", time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"@midnight", "", time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"@weekly", "", time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)},
		{"@monthly", "", time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"@yearly", "", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@annually", "", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"0 3 * * MON", "", time.Date(2026, 1, 5, 3, 0, 0, 0, time.UTC)},
		{"0 12 * * *", "Asia/Tokyo", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)},
		{"0 0 29 2 *", "", time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"@every 5m", "", time.Date(2026, 1, 1, 10, 10, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		cr, err := schedule.ParseCron(c.line, c.tz)
		if err != nil {
			t.Errorf("ParseCron(%q, %q): %v", c.line, c.tz, err)
			continue
		}
		if got := cr.Next(at); !got.Equal(c.next) {
			t.Errorf("%q in %q: Next(%v) = %v, want %v", c.line, c.tz, at, got, c.next)
		}
	}
}

// TestEveryAnchoredAtEpoch: @every ticks are multiples of the interval since the Unix
// epoch, whatever time a host asks from, so two hosts, or a host before and after a
// restart, agree on them.
func TestEveryAnchoredAtEpoch(t *testing.T) {
	t.Parallel()
	c, err := schedule.ParseCron("@every 7m", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []time.Time{
		time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 13, 3, 17, 5, time.UTC),
		time.Date(2026, 11, 30, 13, 6, 59, 999, time.UTC),
		time.Unix(-1000, 0),
	} {
		next := c.Next(from)
		if next.Unix()%(7*60) != 0 || !next.After(from) || next.Sub(from) > 7*time.Minute {
			t.Errorf("Next(%v) = %v: not the first multiple of 7m since the epoch after it", from, next)
		}
	}
}

// TestDaylightSaving pins the behaviour the README documents, for a daily 02:30 in
// Europe/Berlin in 2026: on 29 March (clocks go from 02:00 to 03:00) it does not fire;
// on 25 October (03:00 goes back to 02:00) it fires at both 02:30s, an hour apart.
func TestDaylightSaving(t *testing.T) {
	t.Parallel()
	c, err := schedule.ParseCron("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ticks := func(from time.Time, n int) []time.Time {
		var out []time.Time
		for range n {
			from = c.Next(from)
			out = append(out, from.UTC())
		}
		return out
	}
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		from time.Time
		want []time.Time
	}{
		{utc(3, 27, 12, 0), []time.Time{utc(3, 28, 1, 30), utc(3, 30, 0, 30)}},                                            // gap: none on the 29th
		{utc(10, 23, 12, 0), []time.Time{utc(10, 24, 0, 30), utc(10, 25, 0, 30), utc(10, 25, 1, 30), utc(10, 26, 1, 30)}}, // repeat: two on the 25th
	} {
		got := ticks(c.from, len(c.want))
		for i := range got {
			if !got[i].Equal(c.want[i]) {
				t.Errorf("from %v: ticks %v, want %v", c.from, got, c.want)
				break
			}
		}
	}
}

func TestLatest(t *testing.T) {
	t.Parallel()
	c, _ := schedule.ParseCron("*/1 * * * *", "")
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got, ok := c.Latest(base, base.Add(90*time.Second)); !ok || !got.Equal(base.Add(time.Minute)) {
		t.Errorf("Latest over 90s = %v, %v", got, ok)
	}
	if _, ok := c.Latest(base, base.Add(59*time.Second)); ok {
		t.Error("Latest found a tick in (00:00, 00:00:59]")
	}
	// A year down: the newest missed tick, found without walking the year.
	if got, ok := c.Latest(base, base.AddDate(1, 0, 0).Add(30*time.Second)); !ok || !got.Equal(base.AddDate(1, 0, 0)) {
		t.Errorf("Latest over a year = %v, %v", got, ok)
	}
	y, _ := schedule.ParseCron("@yearly", "")
	if got, ok := y.Latest(base, base.AddDate(3, 1, 0)); !ok || !got.Equal(base.AddDate(3, 0, 0)) {
		t.Errorf("@yearly Latest over 3 years = %v, %v", got, ok)
	}
}
