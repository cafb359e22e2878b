package host_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/host"
)

func TestManifestSchedules(t *testing.T) {
	t.Parallel()
	m, err := host.ReadManifest("../testdata/manifests/reports.wasm") // its manifest, reports.toml
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Schedules()) != 2 {
		t.Fatalf("schedules %+v, want 2", m.Schedules())
	}
	a, b := m.Schedules()[0], m.Schedules()[1]
	if a.Name != "nightly" || a.Cron != "30 2 * * *" || a.Timezone != "Europe/Berlin" ||
		string(a.Payload) != `{"kind": "daily"}` || a.Headers["source"] != "cron" || a.Overlap != "allow" || a.CatchUp {
		t.Errorf("first schedule %+v", a)
	}
	if b.Name != "@every 10m" || b.Timezone != "UTC" || b.Overlap != "skip" || !b.CatchUp || b.Payload != nil {
		t.Errorf("second schedule (defaults) %+v", b)
	}
}

// TestManifestScheduleRefused: a bad schedule is refused with the line of the key at
// fault and the reason.
func TestManifestScheduleRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, text string
		line       int
		field      string
		problem    string
	}{
		{"never fires", "[[schedule]]\ncron = \"@hourly\"\n\n[[schedule]]\nname = \"leap\"\ncron = \"0 0 30 2 *\"\n",
			6, "schedule.1.cron", `cron "0 0 30 2 *": it never fires`},
		{"six fields", "[[schedule]]\ncron = \"0 0 * * * *\"\n", 2, "schedule.0.cron", "expected exactly 5 fields"},
		{"zone prefix", "[[schedule]]\ncron = \"CRON_TZ=Asia/Tokyo 0 3 * * *\"\n", 2, "schedule.0.cron", "timezone ="},
		{"sub-second", "[[schedule]]\ncron = \"@every 100ms\"\n", 2, "schedule.0.cron", "below a second"},
		{"bad zone", "[[schedule]]\ncron = \"0 3 * * *\"\ntimezone = \"Nowhere/City\"\n", 2, "schedule.0.cron", "not an IANA zone"},
		{"no cron", "[[schedule]]\npayload = \"x\"\n", 1, "schedule.0", "cron is required"},
		{"unknown key", "[[schedule]]\ncron = \"@daily\"\ncatchup = false\n", 3, "schedule.0.catchup", "unknown key"},
		{"overlap", "[[schedule]]\ncron = \"@daily\"\noverlap = \"queue\"\n", 3, "schedule.0.overlap", `want "skip" or "allow"`},
		{"catch_up", "[[schedule]]\ncron = \"@daily\"\ncatch_up = \"yes\"\n", 3, "schedule.0.catch_up", "want true or false"},
		{"same name", "[[schedule]]\ncron = \"@daily\"\n[[schedule]]\ncron = \"@daily\"\n", 3, "schedule.1", `the name "@daily" too`},
		{"reserved header", "[[schedule]]\ncron = \"@daily\"\nheaders = { wasmjobs-x = \"1\" }\n", 3, "schedule.0.headers.wasmjobs-x", "reserved"},
		{"payload too large", "max_payload = 4\n[[schedule]]\ncron = \"@daily\"\npayload = \"12345\"\n", 4, "schedule.0.payload", "passes max_payload 4"},
		{"not a table array", "schedule = \"@daily\"\n", 1, "schedule", "want [[schedule]] tables"},
	} {
		_, err := host.ParseManifest("m.toml", []byte(c.text))
		var me *host.ManifestError
		if !errors.As(err, &me) {
			t.Errorf("%s: error %v, want a *ManifestError", c.name, err)
			continue
		}
		if me.Line != c.line || me.Field != c.field || !strings.Contains(me.Problem, c.problem) {
			t.Errorf("%s: %v (line %d, field %q), want line %d, field %q, saying %q", c.name, err, me.Line, me.Field, c.line, c.field, c.problem)
		}
	}
}
