package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The report owns only the generated sections of BENCHMARKS.md: each one sits between
// an opening and a closing marker line, and a run replaces what is between the two in
// place. Everything outside them (the sections measured by hand, prose) is kept byte for
// byte, so that a run of the report never drops what it did not measure.
const (
	markerOpen  = "<!-- generated:"
	markerClose = "<!-- /generated:"
	markerEnd   = " -->"
)

// The names of the generated sections, as their markers spell them.
const (
	sectionMatrix    = "matrix"        // the title, the intro and the matrix's table
	sectionColdStart = "cold-start"    // the Go guest's cold start
	sectionHotSwap   = "hot-swap"      // the hot swaps and their parts
	sectionRiver     = "river"         // River on PostgreSQL, the peer
	sectionHTTP      = "outbound-http" // make bench-http's rows
)

// sectionOrder is the order the report's sections go in: a section missing from the file
// goes right after the nearest one before it here that the file has.
func sectionOrder() []string {
	return []string{sectionMatrix, sectionColdStart, sectionHotSwap, sectionRiver, sectionHTTP}
}

// openMarker and closeMarker are a generated section's two marker lines.
func openMarker(name string) string  { return markerOpen + name + markerEnd }
func closeMarker(name string) string { return markerClose + name + markerEnd }

// segment is a run of a document: hand-written text (name empty), or a generated
// section whose body lies between its marker lines.
type segment struct {
	name string
	text string // hand-written text, or the generated section's body
	tail string // for a generated section: what ends its closing marker's line ("\n", or "" at the end of the file)
}

func (s segment) String() string {
	if s.name == "" {
		return s.text
	}
	return openMarker(s.name) + "\n" + s.text + closeMarker(s.name) + s.tail
}

// markerName returns the name of the marker that line is, and whether it closes a
// section, or ok false when line is no marker. A line that starts like a marker but is
// not a well-formed one is an error, not text: it would otherwise hide a section from
// the report, which would then write a second one.
func markerName(line string) (name string, closing, ok bool, err error) {
	trimmed := strings.TrimRight(line, " \t\r")
	rest, closing := strings.CutPrefix(trimmed, markerClose)
	if !closing {
		var opening bool
		if rest, opening = strings.CutPrefix(trimmed, markerOpen); !opening {
			return "", false, false, nil
		}
	}
	name, ended := strings.CutSuffix(rest, markerEnd)
	if !ended || name == "" || strings.IndexFunc(name, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-'
	}) >= 0 {
		return "", false, false, fmt.Errorf("%q is not a marker: want %s or %s, NAME of a-z, 0-9 and -", trimmed, openMarker("NAME"), closeMarker("NAME"))
	}
	return name, closing, true, nil
}

// parseSections splits doc into hand-written text and generated sections, or says which
// marker is wrong: one that opens with no close, closes with none open, opens inside
// another section, or names a section the document already has.
func parseSections(doc string) ([]segment, error) {
	var segs []segment
	seen := map[string]int{} // a section's name to the line of its opening marker
	open, openLine := "", 0  // the section being read, and the line of its opening marker
	start := 0               // where the current segment's text starts
	for lineNo, off := 1, 0; off < len(doc); lineNo++ {
		end := strings.IndexByte(doc[off:], '\n')
		next := len(doc)
		if end >= 0 {
			next = off + end + 1
		}
		line := strings.TrimSuffix(doc[off:next], "\n")
		name, closing, ok, err := markerName(line)
		switch {
		case err != nil:
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		case !ok:
		case !closing && open != "":
			return nil, fmt.Errorf("line %d: %s opens inside section %q (opened at line %d with %s), which has not closed", lineNo, openMarker(name), open, openLine, openMarker(open))
		case !closing:
			if first, dup := seen[name]; dup {
				return nil, fmt.Errorf("line %d: %s appears twice (first at line %d): the report would not know which to replace", lineNo, openMarker(name), first)
			}
			seen[name] = lineNo
			if start < off {
				segs = append(segs, segment{text: doc[start:off]})
			}
			open, openLine, start = name, lineNo, next
		case open == "":
			return nil, fmt.Errorf("line %d: %s closes a section that is not open", lineNo, closeMarker(name))
		case name != open:
			return nil, fmt.Errorf("line %d: %s closes section %q, but the open one is %q (opened at line %d): want %s", lineNo, closeMarker(name), name, open, openLine, closeMarker(open))
		default:
			segs = append(segs, segment{name: open, text: doc[start:off], tail: doc[off+len(line) : next]})
			open, start = "", next
		}
		off = next
	}
	if open != "" {
		return nil, fmt.Errorf("line %d: %s has no %s after it", openLine, openMarker(open), closeMarker(open))
	}
	if start < len(doc) {
		segs = append(segs, segment{text: doc[start:]})
	}
	return segs, nil
}

// spliceSections returns doc with each of sections (a name to its body) in place of the
// generated section of that name, and everything else in doc as it was. A section doc
// lacks goes right after the nearest one before it in order that doc has (at doc's start
// when it has none), with a blank line between. A body's leading and trailing blank
// lines are dropped, so that the markers sit right on its first and last lines.
func spliceSections(doc string, order []string, sections map[string]string) (string, error) {
	segs, err := parseSections(doc)
	if err != nil {
		return "", err
	}
	for name := range sections {
		if !slices.Contains(order, name) {
			return "", fmt.Errorf("section %q is not one of the report's (%s)", name, strings.Join(order, ", "))
		}
	}
	body := func(name string) string {
		if b := strings.Trim(sections[name], "\n"); b != "" {
			return b + "\n"
		}
		return ""
	}
	at := func(name string) int {
		return slices.IndexFunc(segs, func(s segment) bool { return s.name == name })
	}
	for i, s := range segs {
		if _, ok := sections[s.name]; ok && s.name != "" {
			segs[i].text = body(s.name)
		}
	}
	for i, name := range order {
		if _, ok := sections[name]; !ok || at(name) >= 0 {
			continue
		}
		s := segment{name: name, text: body(name), tail: "\n"}
		after := -1
		for _, before := range slices.Backward(order[:i]) {
			if after = at(before); after >= 0 {
				break
			}
		}
		switch {
		case after >= 0:
			// The section before it ends the file without a newline: give it one.
			segs[after].tail = "\n"
			segs = slices.Insert(segs, after+1, segment{text: "\n"}, s)
		case len(segs) > 0:
			segs = slices.Insert(segs, 0, s, segment{text: "\n"})
		default:
			segs = append(segs, s)
		}
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.String())
	}
	return b.String(), nil
}

// readSections reads the file the report writes (empty when there is none yet) and
// checks its markers, so that a run finds a malformed file before it measures, not after.
func readSections(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if _, err := parseSections(string(b)); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return string(b), nil
}

// writeSections replaces sections in the file at path in place, as spliceSections does.
func writeSections(path string, sections map[string]string) error {
	doc, err := readSections(path)
	if err != nil {
		return err
	}
	out, err := spliceSections(doc, sectionOrder(), sections)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
