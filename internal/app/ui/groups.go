package ui

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/wasmjobs/wasmjobs/backend"
	"github.com/wasmjobs/wasmjobs/internal/app/inspect"
)

// MaxDrawnTasks bounds the tasks a workflow's page draws as a graph: a larger
// workflow is shown as its table alone.
const MaxDrawnTasks = 400

// Sizes of the drawn graph, in SVG units.
const (
	dagNodeW, dagNodeH = 150, 34
	dagColumn, dagRow  = 190, 48
	dagMargin          = 8
)

// dagNode is one task drawn: its box's top left corner.
type dagNode struct {
	backend.GroupMember
	X, Y int
}

// dagEdge is one dependency drawn, from the dependency's right side to the task's left.
type dagEdge struct{ X1, Y1, X2, Y2 int }

// dag is a workflow drawn: each task in the column of its depth (one past the deepest
// task it depends on), in the order the workflow lists them.
type dag struct {
	Nodes         []dagNode
	Edges         []dagEdge
	Width, Height int
}

// layoutDAG draws tasks, which come in an order where each follows those it depends
// on (as a workflow's record keeps them).
func layoutDAG(tasks []backend.GroupMember) dag {
	var d dag
	at := make(map[string]int, len(tasks)) // name -> node
	var rows []int                         // tasks placed per column
	for _, t := range tasks {
		col := 0
		for _, dep := range t.DependsOn {
			if i, ok := at[dep]; ok {
				col = max(col, (d.Nodes[i].X-dagMargin)/dagColumn+1)
			}
		}
		for len(rows) <= col {
			rows = append(rows, 0)
		}
		n := dagNode{GroupMember: t, X: dagMargin + col*dagColumn, Y: dagMargin + rows[col]*dagRow}
		rows[col]++
		at[t.Name] = len(d.Nodes)
		d.Nodes = append(d.Nodes, n)
		d.Width, d.Height = max(d.Width, n.X+dagNodeW+dagMargin), max(d.Height, n.Y+dagNodeH+dagMargin)
		for _, dep := range t.DependsOn {
			if i, ok := at[dep]; ok {
				from := d.Nodes[i]
				d.Edges = append(d.Edges, dagEdge{from.X + dagNodeW, from.Y + dagNodeH/2, n.X, n.Y + dagNodeH/2})
			}
		}
	}
	return d
}

// groupsUnavailable is the note of a group page on a backend that keeps none.
func (s *server) groupsUnavailable() string {
	if s.in.Can().Groups {
		return ""
	}
	return "this backend cannot hold a job until others end (RabbitMQ keeps no record of a job once it is acknowledged): workflows and batches need the embedded backend (the default) or memory"
}

// groups lists the workflows or the batches, a page at a time.
func (s *server) groups(kind backend.GroupKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := kind.Plural()
		data := map[string]any{"Unavailable": s.groupsUnavailable(), "Kind": string(kind), "Path": name}
		if s.in.Can().Groups {
			page, err := s.in.Groups(r.Context(), kind, r.URL.Query().Get("cursor"), 0)
			if err != nil {
				s.failErr(w, r, err)
				return
			}
			var views []any
			for _, g := range page.Groups {
				if kind == backend.GroupBatch {
					views = append(views, inspect.ViewBatch(g))
				} else {
					views = append(views, inspect.ViewWorkflow(g))
				}
			}
			data["Groups"], data["Next"] = views, page.Next
		}
		s.render(w, http.StatusOK, "groups", page{Title: map[backend.GroupKind]string{backend.GroupWorkflow: "Workflows", backend.GroupBatch: "Batches"}[kind], Nav: name, Data: data})
	}
}

// group shows one workflow (its graph, live) or batch (its progress, live).
func (s *server) group(kind backend.GroupKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		g, err := s.in.Group(r.Context(), kind, id)
		if err != nil {
			s.failErr(w, r, err)
			return
		}
		data := map[string]any{"Running": g.State == backend.GroupRunning}
		title := fmt.Sprintf("Workflow %s", id)
		if kind == backend.GroupBatch {
			b := inspect.ViewBatch(g)
			data["Batch"] = b
			data["Bar"] = batchBar(b)
			title = fmt.Sprintf("Batch %s", id)
		} else {
			data["Workflow"] = inspect.ViewWorkflow(g)
			if len(g.Members) <= MaxDrawnTasks {
				data["DAG"] = layoutDAG(g.Members)
			}
		}
		s.render(w, http.StatusOK, string(kind), page{Title: title, Nav: kind.Plural(), Done: r.URL.Query().Get("done"), Data: data})
	}
}

// barPart is one state's share of a batch's progress bar: a rectangle of an SVG 100
// units wide, from X (attributes, not an inline style, which the dashboard's content
// security policy refuses).
type barPart struct {
	State  string
	Count  int
	X, Pct float64
}

// batchBar is a batch's jobs by state, as shares of its total, side by side.
func batchBar(b inspect.BatchView) []barPart {
	var parts []barPart
	x := 0.0
	for _, p := range []barPart{{State: "succeeded", Count: b.Succeeded}, {State: "dead", Count: b.Dead}, {State: "cancelled", Count: b.Cancelled}, {State: "pending", Count: b.Pending}} {
		if p.Count > 0 && b.Total > 0 {
			p.X, p.Pct = x, 100*float64(p.Count)/float64(b.Total)
			x += p.Pct
			parts = append(parts, p)
		}
	}
	return parts
}

// cancelGroup cancels a workflow or batch from its page.
func (s *server) cancelGroup(kind backend.GroupKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if _, err := s.in.CancelGroup(r.Context(), kind, id); err != nil {
			s.failErr(w, r, err)
			return
		}
		http.Redirect(w, r, "/ui/"+kind.Plural()+"/"+url.PathEscape(id)+"?done=cancelled", http.StatusSeeOther)
	}
}
