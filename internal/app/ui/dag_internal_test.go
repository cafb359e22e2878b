package ui

import (
	"testing"

	"github.com/wasmjobs/wasmjobs/backend"
)

// Each task is drawn in the column one past its deepest dependency, the tasks of a
// column one under the other, with one edge per dependency from the dependency's
// right side to the task's left.
func TestLayoutDAG(t *testing.T) {
	t.Parallel()
	d := layoutDAG([]backend.GroupMember{
		{Name: "fetch"}, {Name: "other"},
		{Name: "render", DependsOn: []string{"fetch"}},
		{Name: "publish", DependsOn: []string{"render", "other"}},
		{Name: "notify", DependsOn: []string{"fetch"}},
	})
	want := map[string][2]int{"fetch": {0, 0}, "other": {0, 1}, "render": {1, 0}, "publish": {2, 0}, "notify": {1, 1}}
	for _, n := range d.Nodes {
		w := want[n.Name]
		if n.X != dagMargin+w[0]*dagColumn || n.Y != dagMargin+w[1]*dagRow {
			t.Errorf("%s at (%d, %d), want column %d row %d", n.Name, n.X, n.Y, w[0], w[1])
		}
	}
	if len(d.Edges) != 4 {
		t.Fatalf("%d edges, want 4: %+v", len(d.Edges), d.Edges)
	}
	if e := d.Edges[0]; e.X1 != dagMargin+dagNodeW || e.X2 != dagMargin+dagColumn || e.Y1 != e.Y2 {
		t.Errorf("the edge fetch -> render: %+v", e)
	}
	if d.Width != dagMargin+2*dagColumn+dagNodeW+dagMargin || d.Height != dagMargin+dagRow+dagNodeH+dagMargin {
		t.Errorf("size %dx%d", d.Width, d.Height)
	}
}
