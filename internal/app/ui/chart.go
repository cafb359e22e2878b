package ui

import (
	"fmt"
	"html/template"
	"strings"
)

// sparkline draws settled (and failed, in red) per bucket as an inline SVG polyline
// chart of w x h, scaled to the largest bucket. It is drawn by the server: no script
// and no chart library.
func sparkline(settled, failed []int, w, h int) template.HTML {
	peak := 1
	for _, v := range settled {
		peak = max(peak, v)
	}
	line := func(vals []int) string {
		var b strings.Builder
		n := max(len(vals)-1, 1)
		for i, v := range vals {
			x := float64(i) * float64(w) / float64(n)
			y := float64(h-2) - float64(v)*float64(h-4)/float64(peak)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		return b.String()
	}
	total, fails := 0, 0
	for i := range settled {
		total += settled[i]
		fails += failed[i]
	}
	label := fmt.Sprintf("%d settled, %d failed in the last %d buckets (peak %d per bucket)", total, fails, len(settled), peak)
	bad := "" // drawn only when something failed: a red baseline would alarm for nothing
	if fails > 0 {
		bad = fmt.Sprintf(`<polyline class="bad" fill="none" stroke-width="1.5" points="%s"/>`, line(failed))
	}
	return template.HTML(fmt.Sprintf(
		`<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s"><title>%s</title>`+
			`<polyline class="ok" fill="none" stroke-width="1.5" points="%s"/>%s</svg>`,
		w, h, w, h, template.HTMLEscapeString(label), template.HTMLEscapeString(label), line(settled), bad))
}
