package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRunTrustsHTTPCA: a module granted https to a local server with a certificate of
// its own reaches it when the host is given the certificate with --http-ca, and fails
// with a TLS status without it.
func TestRunTrustsHTTPCA(t *testing.T) {
	t.Parallel()
	srv, cert := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil
		fmt.Fprint(w, "hello over TLS")
	})
	port := portOf(srv)
	url := "https://127.0.0.1:" + port + "/"

	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"with --http-ca", []string{"--http-ca", cert}, "200\nContent-Length: 14\nContent-Type: text/plain; charset=utf-8\nurl " + url + "\nhello over TLS"},
		{"without", nil, "-14\nTLS failure: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeManifest(t, dir, "fetch", "[http]\nallow = [\"https://127.0.0.1:"+port+"\"]\n")
			installModule(t, dir, "abi/http_get", "fetch", "v1")
			h := startHost(t, dir, append([]string{"--backend", "memory"}, tc.flags...)...)
			id := h.enqueueJSON(`{"queue":"fetch","payload":"` + url + `"}`)
			var j jobView
			waitFor(t, "the job to succeed", func() bool { j = h.job(id); return j.State == "succeeded" })
			if !strings.HasPrefix(j.Output, tc.want) {
				t.Fatalf("output %q, want it to start with %q", j.Output, tc.want)
			}
		})
	}
}
