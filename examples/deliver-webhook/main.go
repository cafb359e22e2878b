// Command deliver-webhook is an example wasmjobs handler in Go that makes HTTP
// requests with net/http: it delivers the webhooks that webhook-rust signs.
//
// A job's payload is webhook-rust's child: header lines ("Url: <where to deliver>",
// "X-Signature: sha256=<hex>", ...), an empty line, then the webhook's body. The
// handler POSTs the body, with the other header lines as request headers, to the Url,
// and settles the job by the answer:
//   - 2xx: delivered (ack);
//   - 4xx other than 408 and 429: the receiver refuses it, retrying cannot help
//     (dead letter);
//   - any other answer (408, 429, 5xx, ...): deferred by its Retry-After when it has
//     one (no attempt spent), else retried with the queue's backoff;
//   - a URL outside the grant (not https, or a private or loopback address): dead
//     letter; any other failure to reach the receiver (DNS, refused, TLS, timeout):
//     retried.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	wasmjobs "github.com/wasmjobs/wasmjobs/guest-sdk/go"
	"github.com/wasmjobs/wasmjobs/guest-sdk/go/wjhttp"
)

// delivery is a child job of webhook-rust, parsed.
type delivery struct {
	url     string
	headers http.Header
	body    []byte
}

func parse(payload []byte) (*delivery, error) {
	head, body, ok := bytes.Cut(payload, []byte("\n\n"))
	if !ok {
		return nil, errors.New("no empty line between the header lines and the body")
	}
	d := &delivery{headers: http.Header{}, body: body}
	for line := range strings.SplitSeq(string(head), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("header line %q has no ':'", line)
		}
		if value = strings.TrimSpace(value); strings.EqualFold(name, "Url") {
			d.url = value
		} else {
			d.headers.Add(name, value)
		}
	}
	if d.url == "" {
		return nil, errors.New(`no "Url:" line: give webhook-rust's payload a "url"`)
	}
	if d.headers.Get("Content-Type") == "" {
		if json.Valid(body) {
			d.headers.Set("Content-Type", "application/json")
		} else {
			d.headers.Set("Content-Type", "application/octet-stream")
		}
	}
	return d, nil
}

func deliver(job *wasmjobs.Job) error {
	d, err := parse(job.Payload())
	if err != nil {
		return wasmjobs.DeadLetter("not a delivery: " + err.Error())
	}
	// The grant's timeout (10 s) bounds the request on the host; this deadline leaves
	// the job time to settle within its own.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return wasmjobs.DeadLetter("bad Url: " + err.Error())
	}
	req.Header = d.headers
	resp, err := http.DefaultClient.Do(req)
	switch {
	case errors.Is(err, wjhttp.ErrDenied), errors.Is(err, wjhttp.ErrBlocked), errors.Is(err, wasmjobs.ErrBadArgument):
		return wasmjobs.DeadLetter("cannot deliver: " + redacted(err).Error())
	case err != nil:
		return fmt.Errorf("delivery failed: %w", redacted(err))
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		fmt.Fprintf(job, "delivered: %d", s)
		job.Infof("delivered %d bytes to %s: %d", len(d.body), resp.Request.URL.Host, s)
		return nil
	case s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests:
		return wasmjobs.DeadLetter(fmt.Sprintf("http %d: the receiver refused the delivery: %.200s", s, answer))
	}
	return wjhttp.RetryAfter(resp)
}

// redacted is err for a reason, which the job record keeps: net/http's *url.Error
// holds the full URL, and a receiver's URL may carry a secret in its query, so the
// URL is given as scheme://host/path and the rest of err as it is.
func redacted(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	where := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		where = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
	} else {
		where = "(an unparsable URL)"
	}
	return fmt.Errorf("%s %s: %w", ue.Op, where, ue.Err)
}

func init() { wasmjobs.Handle(deliver) }

func main() {}
