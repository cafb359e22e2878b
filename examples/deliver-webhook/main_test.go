//go:build !wasip1

package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/wasmjobs/wasmjobs/guest-sdk/go/wjhttp"
)

// TestReasonsLeaveOutTheQuery: a failed delivery's reason names the receiver as
// scheme://host/path, never the query that may carry a secret, while the error keeps
// its kind. The request goes through wjhttp's native stand-in host to a real loopback
// server, closed so that the connection is refused.
func TestReasonsLeaveOutTheQuery(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	target := srv.URL + "/hook?token=secret"
	srv.Close()
	resp, err := http.Post(target, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error from a closed server")
	}
	if !strings.Contains(err.Error(), "secret") {
		t.Fatalf("%v: net/http no longer puts the query into its error; the redaction may be moot", err)
	}
	got := redacted(err)
	if msg := got.Error(); strings.Contains(msg, "secret") || !strings.HasPrefix(msg, "Post "+srv.URL+"/hook: ") {
		t.Fatalf("reason %q, want %q and no query", msg, "Post "+srv.URL+"/hook: ...")
	}
	if !errors.Is(got, wjhttp.ErrRefused) {
		t.Fatalf("%v lost its kind", got)
	}
}
