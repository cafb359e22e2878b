package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmjobs/wasmjobs/internal/rigs/abitest"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench"
	"github.com/wasmjobs/wasmjobs/internal/tools/bench/measure"
)

// TestEachRowHasItsOwnPeak runs a row that needs a lot of memory and then one that needs
// little, as the report does: the second row's peak RSS must be its own, not the first
// row's repeated (as it was when every row ran in the report's process).
func TestEachRowHasItsOwnPeak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := buildWasmjobs(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Jobs of 64 MB: the run's payload and the backend's copy of it are resident
	// together, 128 MB at the least.
	heavy, err := runRow(ctx, bin, []string{"bench", "--native", "--jobs", "4", "--payload-size", "67108864", "--concurrency", "1"})
	if err != nil {
		t.Fatal(err)
	}
	light, err := runRow(ctx, bin, []string{"bench", "--native", "--jobs", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	if heavy.PeakRSSMB < 100 || light.PeakRSSMB <= 0 || light.PeakRSSMB > heavy.PeakRSSMB/2 {
		t.Fatalf("peak RSS: %.1f MB for the heavy row, %.1f MB for the light one after it: want each row's own", heavy.PeakRSSMB, light.PeakRSSMB)
	}
	t.Logf("peak RSS: heavy row %.0f MB, light row after it %.0f MB", heavy.PeakRSSMB, light.PeakRSSMB)
}

func TestRowCommandHidesTheBrokerURL(t *testing.T) {
	t.Parallel()
	url := "amqp://guest:guest@127.0.0.1:5682/"
	r := row{args: []string{"bench", "--backend", url, "--compare-raw-amqp"}}
	if got, want := r.command(url), "wasmjobs bench --backend $WASMJOBS_AMQP_URL --compare-raw-amqp"; got != want {
		t.Fatalf("command = %q, want %q", got, want)
	}
}

func TestSwapSectionShowsEveryPart(t *testing.T) {
	t.Parallel()
	var swaps []bench.Swap
	for i := range 200 {
		d := time.Duration(i+1) * time.Millisecond
		swaps = append(swaps, bench.Swap{Total: 4 * d, Event: d, Debounce: d, Load: d, FirstJob: d})
	}
	s := swapSection(swaps)
	for _, want := range []string{"replaced 200 times", "| watcher event | 100ms | 180ms | 198ms | 200ms |", "| debounce |", "| load |", "| first job |", "| **rename to first job** | 400ms | 720ms | 792ms | 800ms |"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the hot swap section lacks %q:\n%s", want, s)
		}
	}
}

// TestHTTPRowsAlternateAndCompare: each concurrency runs the other's order reversed,
// and the section gives each row its share of the ideal and its ratios to the native
// handler and to River at its concurrency.
func TestHTTPRowsAlternateAndCompare(t *testing.T) {
	t.Parallel()
	guests := []httpGuest{{"native", ""}, {"C", "c.wasm"}}
	names := func(o []*httpGuest) (s []string) {
		for _, g := range o {
			if g == nil {
				s = append(s, "river")
			} else {
				s = append(s, g.what)
			}
		}
		return s
	}
	if got := strings.Join(names(httpOrder(guests, 0)), ","); got != "native,C,river" {
		t.Fatalf("first order %s", got)
	}
	if got := strings.Join(names(httpOrder(guests, 1)), ","); got != "river,C,native" {
		t.Fatalf("second order %s", got)
	}
	rows := []httpRow{
		{concurrency: 256, what: "native Go handler", wasmjobs: &bench.Result{JobsPerSec: 5000}},
		{concurrency: 256, what: "C guest", wasmjobs: &bench.Result{JobsPerSec: 4608}},
		{concurrency: 256, what: "River", river: &measure.RiverResult{JobsPerSec: 2304}},
	}
	s := formatHTTPSection(rows, 100000, "0.5", "1.5", "")
	for _, want := range []string{"| 256 | C guest | 4608 | 90% |", "| 0.92 | 2.00 |", "| 256 | River | 2304 | 45% |", "load average 0.5 before, 1.5 after"} {
		if !strings.Contains(s, want) {
			t.Fatalf("the section lacks %q:\n%s", want, s)
		}
	}
}

// block is a generated section as the file holds it.
func block(name, body string) string {
	return openMarker(name) + "\n" + body + closeMarker(name) + "\n"
}

// TestSpliceReplacesOnlyItsSections: the report replaces the sections it is given in
// place, keeps every byte outside them (the hand-measured sections around and between
// them, and the sections it is not given), and puts a section the file lacks right after
// the one before it in the report's order. A second splice changes nothing more.
func TestSpliceReplacesOnlyItsSections(t *testing.T) {
	t.Parallel()
	order := []string{"top", "a", "b", "c"}
	hand := "\n## Tracing on, measured by hand\n\nfigures by hand\n\n"
	for _, tc := range []struct {
		name     string
		doc      string
		sections map[string]string
		want     string
	}{{
		name:     "hand sections before, between and after",
		doc:      "hand before\n" + block("top", "# old top\n") + hand + block("a", "old a\n") + "\n## hand after\n\nno newline at the end",
		sections: map[string]string{"top": "# new top\n", "a": "\nnew a\n\n\n"},
		want:     "hand before\n" + block("top", "# new top\n") + hand + block("a", "new a\n") + "\n## hand after\n\nno newline at the end",
	}, {
		name:     "a section not given is kept as it is",
		doc:      block("a", "old a\n") + hand + block("c", "make bench-http's\n"),
		sections: map[string]string{"a": "new a"},
		want:     block("a", "new a\n") + hand + block("c", "make bench-http's\n"),
	}, {
		name:     "a missing section goes after the one before it, before the hand section",
		doc:      block("top", "top\n") + block("a", "a\n") + hand + block("c", "c\n"),
		sections: map[string]string{"b": "new b\n"},
		want:     block("top", "top\n") + block("a", "a\n") + "\n" + block("b", "new b\n") + hand + block("c", "c\n"),
	}, {
		name:     "a missing last section is appended",
		doc:      block("top", "top\n") + hand,
		sections: map[string]string{"top": "top\n", "c": "## C\n"},
		want:     block("top", "top\n") + "\n" + block("c", "## C\n") + hand,
	}, {
		name:     "a missing section after hand text only is appended at the end",
		doc:      block("a", "a\n") + hand + "## later\n" + block("b", "b\n") + "last hand line\n",
		sections: map[string]string{"c": "## C\n"},
		want:     block("a", "a\n") + hand + "## later\n" + block("b", "b\n") + "\n" + block("c", "## C\n") + "last hand line\n",
	}, {
		name:     "a section before all the file's goes at its start",
		doc:      hand + block("b", "b\n"),
		sections: map[string]string{"top": "# top\n"},
		want:     block("top", "# top\n") + "\n" + hand + block("b", "b\n"),
	}, {
		name:     "a closing marker that ends the file gets its newline when one follows it",
		doc:      "hand\n" + openMarker("a") + "\nold\n" + closeMarker("a"),
		sections: map[string]string{"a": "new\n", "b": "b\n"},
		want:     "hand\n" + block("a", "new\n") + "\n" + block("b", "b\n"),
	}, {
		name:     "a closing marker that ends the file stays so",
		doc:      "hand\n" + openMarker("a") + "\nold\n" + closeMarker("a"),
		sections: map[string]string{"a": "new\n"},
		want:     "hand\n" + openMarker("a") + "\nnew\n" + closeMarker("a"),
	}, {
		name:     "a new file gets every section, in order",
		doc:      "",
		sections: map[string]string{"b": "b\n", "top": "# top\n", "a": "a\n"},
		want:     block("top", "# top\n") + "\n" + block("a", "a\n") + "\n" + block("b", "b\n"),
	}, {
		name:     "marker-like text inside a line is text",
		doc:      "see `" + openMarker("a") + "` markers\n" + block("a", "a\n"),
		sections: map[string]string{"a": "new a\n"},
		want:     "see `" + openMarker("a") + "` markers\n" + block("a", "new a\n"),
	}, {
		name:     "an empty body",
		doc:      hand + block("a", "a\n") + hand,
		sections: map[string]string{"a": "\n\n"},
		want:     hand + block("a", "") + hand,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := spliceSections(tc.doc, order, tc.sections)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("spliced:\n%q\nwant:\n%q", got, tc.want)
			}
			again, err := spliceSections(got, order, tc.sections)
			if err != nil {
				t.Fatal(err)
			}
			if again != got {
				t.Fatalf("a second splice changed it again:\n%q\nfirst:\n%q", again, got)
			}
		})
	}
}

// TestSpliceRefusesMalformedMarkers: a file whose markers are wrong is an error naming
// the marker and its line, not a file written with a section lost or doubled.
func TestSpliceRefusesMalformedMarkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		doc      string
		sections map[string]string
		want     []string // in the error
	}{{
		name: "an open without a close",
		doc:  "hand\n" + openMarker("a") + "\nbody\n## hand after\n",
		want: []string{"line 2", "<!-- generated:a -->", "has no <!-- /generated:a -->"},
	}, {
		name: "a section twice",
		doc:  block("a", "one\n") + "hand\n" + block("a", "two\n"),
		want: []string{"line 5", "<!-- generated:a --> appears twice", "first at line 1"},
	}, {
		name: "a close without an open",
		doc:  "hand\n" + closeMarker("a") + "\n",
		want: []string{"line 2", "<!-- /generated:a --> closes a section that is not open"},
	}, {
		name: "an open inside another section",
		doc:  openMarker("a") + "\n" + block("b", "b\n") + closeMarker("a") + "\n",
		want: []string{"line 2", "<!-- generated:b --> opens inside section \"a\"", "opened at line 1"},
	}, {
		name: "a close of another section",
		doc:  openMarker("a") + "\nbody\n" + closeMarker("b") + "\n",
		want: []string{"line 3", "<!-- /generated:b --> closes section \"b\"", "the open one is \"a\""},
	}, {
		name: "a marker misspelt",
		doc:  "hand\n<!-- generated:a-->\nbody\n" + closeMarker("a") + "\n",
		want: []string{"line 2", `"<!-- generated:a-->" is not a marker`},
	}, {
		name: "a marker without a name",
		doc:  "<!-- /generated: -->\n",
		want: []string{"line 1", "is not a marker"},
	}, {
		name:     "a section that is not the report's",
		doc:      block("a", "a\n"),
		sections: map[string]string{"z": "z\n"},
		want:     []string{`section "z" is not one of the report's (top, a, b)`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := spliceSections(tc.doc, []string{"top", "a", "b"}, tc.sections)
			if err == nil {
				t.Fatalf("spliced without an error:\n%s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestWriteSectionsNamesTheFile: a malformed file is refused before anything is
// written, and the error names the file; a file that does not exist yet is written whole.
func TestWriteSectionsNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "BENCHMARKS.md")
	doc := "# hand\n" + openMarker(sectionHotSwap) + "\nold\n"
	if err := os.WriteFile(bad, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	err := writeSections(bad, map[string]string{sectionHotSwap: "new\n"})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), closeMarker(sectionHotSwap)) {
		t.Fatalf("writing a file with an unclosed section: %v", err)
	}
	if b, _ := os.ReadFile(bad); string(b) != doc {
		t.Fatalf("the malformed file was changed:\n%s", b)
	}
	fresh := filepath.Join(dir, "new.md")
	if err := writeSections(fresh, map[string]string{sectionHTTP: "## HTTP\n", sectionMatrix: "# Benchmarks\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fresh); string(b) != block(sectionMatrix, "# Benchmarks\n")+"\n"+block(sectionHTTP, "## HTTP\n") {
		t.Fatalf("a new file:\n%s", b)
	}
}

// TestBenchmarksKeepsItsHandSections splices every section of the report over the
// repository's BENCHMARKS.md: each section the report writes is already marked there (so
// a run replaces it rather than adding a second one), and every section measured by hand
// survives, byte for byte.
func TestBenchmarksKeepsItsHandSections(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(abitest.Dir(), "..", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	segs, err := parseSections(doc)
	if err != nil {
		t.Fatalf("BENCHMARKS.md: %v", err)
	}
	// The heading each section the report writes starts with; River's is absent while
	// no run has had a Postgres, and a run puts it after the hot swaps.
	headings := map[string]string{
		sectionMatrix:    "# Benchmarks\n",
		sectionColdStart: "## Go guest cold start\n",
		sectionHotSwap:   "## Hot swap\n",
		sectionHTTP:      "## Outbound HTTP: one GET a job\n",
	}
	var hand []string
	marked := map[string]bool{}
	for _, s := range segs {
		if s.name == "" {
			hand = append(hand, s.text)
			for name, h := range headings {
				if strings.HasPrefix(s.text, h) || strings.Contains(s.text, "\n"+h) {
					t.Errorf("BENCHMARKS.md has %q outside its %s markers", strings.TrimSpace(h), openMarker(name))
				}
			}
			continue
		}
		marked[s.name] = true
		if h, ok := headings[s.name]; ok && !strings.HasPrefix(s.text, h) {
			t.Errorf("BENCHMARKS.md's section %q starts %q, not with %q", s.name, strings.SplitN(s.text, "\n", 2)[0], strings.TrimSpace(h))
		}
	}
	for name := range headings {
		if !marked[name] {
			t.Errorf("BENCHMARKS.md has no %s: a run would add a second %q", openMarker(name), strings.TrimSpace(headings[name]))
		}
	}

	sections := map[string]string{}
	for _, name := range sectionOrder() {
		sections[name] = "## " + name + ", generated\n\nnew figures\n"
	}
	out, err := spliceSections(doc, sectionOrder(), sections)
	if err != nil {
		t.Fatal(err)
	}
	var byHand []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## ") && (strings.Contains(line, "measured by hand") || strings.Contains(line, "a separate run")) {
			byHand = append(byHand, line)
		}
	}
	if len(byHand) < 5 {
		t.Fatalf("BENCHMARKS.md has %d headings measured by hand, want at least 5: %q", len(byHand), byHand)
	}
	for _, h := range byHand {
		if strings.Count(out, "\n"+h+"\n") != 1 {
			t.Errorf("after a splice, %q is not there once", h)
		}
	}
	for _, text := range hand {
		if !strings.Contains(out, text) {
			t.Errorf("after a splice, the hand-written text starting %q is not there whole", strings.SplitN(strings.TrimSpace(text), "\n", 2)[0])
		}
	}
	for _, name := range sectionOrder() {
		if !strings.Contains(out, block(name, sections[name])) {
			t.Errorf("after a splice, the section %q is not its new one", name)
		}
	}
}
