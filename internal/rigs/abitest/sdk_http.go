package abitest

import (
	"fmt"
	"io"
	"net/http"
)

// HTTPLanguages are the languages whose conformance handler runs the HTTP cases of
// HTTPCases; a language joins when its SDK can make requests.
var HTTPLanguages = []string{"go", "rust", "c", "assemblyscript", "typescript"}

// HTTPManifest is the manifest the HTTP cases load the conformance handler with: it
// grants loopback on every port, so that a case's server is reachable and any other
// address is not.
const HTTPManifest = `max_attempts = 5
[http]
allow = ["http://127.0.0.1:1-65535"]
`

// HTTPServer is the loopback server of the HTTP cases:
//   - /echo answers 201 with the header X-Reply twice (a, then b) and the body
//     "METHOD PATH X-CONFORMANCE [BODY]", where X-CONFORMANCE is the request's
//     X-Conformance header (empty when absent) and BODY the request's body;
//   - /limited answers 429 with Retry-After: 2;
//   - /unavailable answers 503 without Retry-After;
//   - /limited-now answers 429 with Retry-After: 0, /limited-past with Retry-After a
//     date long past, /limited-forever with Retry-After of more seconds than a day
//     holds (each a delay every SDK clamps into [1 ms, 24 h]).
func HTTPServer() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header()["Date"] = nil
		w.Header().Add("X-Reply", "a")
		w.Header().Add("X-Reply", "b")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s %s [%s]", r.Method, r.URL.Path, r.Header.Get("X-Conformance"), body)
	})
	mux.HandleFunc("/limited", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	for path, v := range map[string]string{"/limited-now": "0", "/limited-past": PastDate, "/limited-forever": "99999999999"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusTooManyRequests)
		})
	}
	mux.HandleFunc("/unavailable", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	return mux
}

// PastDate is the Retry-After of HTTPServer's /limited-past: an IMF-fixdate long past.
const PastDate = "Sun, 06 Nov 1994 08:49:37 GMT"

// InjectValue is the value of the header X-Inject in the case "http-inject:URL": a
// line feed in it would make it two headers on the host, so every SDK refuses it.
const InjectValue = "a\nX-Evil: 1"

// HTTPCases returns the HTTP cases of the cross-language table against an HTTPServer
// at base (such as "http://127.0.0.1:PORT"). A conformance handler reads them so:
//   - "http-get:URL": GET URL with the request header "X-Conformance: yes"; on a
//     response, ack with the output "STATUS\nX-REPLY\nBODY", X-REPLY being the values
//     of the response's X-Reply header joined by ","; on a failure, ack with the output
//     "error CODE", CODE the ABI's status of the failure (abi/SPEC.md, -10 to -21);
//   - "http-post:URL": the same with the method POST, the body "ping" and the header
//     "Content-Type: text/plain";
//   - "http-retry-after:URL": GET URL; on a 429 or 503, settle the job with the SDK's
//     Retry-After helper, which defers by the header's delay (no attempt spent) with
//     the reason "http STATUS: Retry-After VALUE", and without the header retries with
//     the queue's backoff (no delay staged) with the reason "http STATUS"; on any other
//     status ack with the output "STATUS";
//   - "http-inject:URL": GET URL with the header "X-Inject: " + InjectValue through the
//     SDK's structured header API; the SDK refuses it before anything is sent, and the
//     handler acks with "error -2" (the ABI's BAD_ARGUMENT).
func HTTPCases(base string) []SDKCase {
	return []SDKCase{
		{Payload: "http-get:" + base + "/echo", Kind: "ack", Code: code(0), Output: "201\na,b\nGET /echo yes []"},
		{Payload: "http-post:" + base + "/echo", Kind: "ack", Code: code(0), Output: "201\na,b\nPOST /echo yes [ping]"},
		// Ungranted: another loopback address, and a name (no resolver is asked).
		{Payload: "http-get:http://127.0.0.2:1/", Kind: "ack", Code: code(0), Output: "error -10"},
		{Payload: "http-get:https://api.example.com/", Kind: "ack", Code: code(0), Output: "error -10"},
		{Payload: "http-retry-after:" + base + "/limited", Kind: "defer", Code: code(2), Reason: "http 429: Retry-After 2", DelayMs: ms(2000)},
		// Retry-After 0 or a past date still defers (a deferral needs a positive delay:
		// without one the attempt would be spent), by 1 ms; a delay past a day is a day.
		{Payload: "http-retry-after:" + base + "/limited-now", Kind: "defer", Code: code(2), Reason: "http 429: Retry-After 0", DelayMs: ms(1)},
		{Payload: "http-retry-after:" + base + "/limited-past", Kind: "defer", Code: code(2), Reason: "http 429: Retry-After " + PastDate, DelayMs: ms(1)},
		{Payload: "http-retry-after:" + base + "/limited-forever", Kind: "defer", Code: code(2), Reason: "http 429: Retry-After 99999999999", DelayMs: ms(24 * 3600 * 1000)},
		{Payload: "http-retry-after:" + base + "/unavailable", Kind: "retry", Code: code(1), Reason: "http 503"},
		{Payload: "http-inject:" + base + "/echo", Kind: "ack", Code: code(0), Output: "error -2"},
		{Payload: "http-retry-after:" + base + "/echo", Kind: "ack", Code: code(0), Output: "201"},
	}
}
