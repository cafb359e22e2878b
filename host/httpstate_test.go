package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// TestResetClosesALeftoverHTTPSession: a call's requests never outlive the state they
// belong to, whatever path the call took: reset, at the start of the next call and
// after each job, closes a session left open.
func TestResetClosesALeftoverHTTPSession(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(srv.Close)
	g, err := outbound.ParseGrant(map[string]any{"allow": []any{srv.URL}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := outbound.NewClient(g, outbound.Options{})
	t.Cleanup(client.Close)
	m := &Module{http: client}
	var st callState
	st.reset(nil, m, nil)
	st.http.session = client.NewSession()
	session := st.http.session
	t.Cleanup(session.Close)
	if _, err := session.Start(context.Background(), outbound.Request{URL: srv.URL}); err != nil {
		t.Fatal(err)
	}
	st.reset(nil, m, nil)
	if n := session.Open(); n != 0 {
		t.Fatalf("%d requests of the previous call still open after reset", n)
	}
}
