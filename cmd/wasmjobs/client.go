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
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/backend/rabbitmq"
)

// apiFlags are the flags of the commands that talk to a running host.
type apiFlags struct {
	server  string
	token   string
	json    bool
	backend string
}

func (a *apiFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.server, "server", "http://127.0.0.1:8080", "the API of a running `wasmjobs run` (env WASMJOBS_SERVER)")
	cmd.Flags().StringVar(&a.token, "token", "", "the API's bearer token (env WASMJOBS_TOKEN)")
}

// addBackend lets a command talk straight to a broker instead of a host.
func (a *apiFlags) addBackend(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.backend, "backend", "", "talk straight to a RabbitMQ broker (amqp://...) instead of a host's API")
}

// via runs a command that talks to the broker of --backend or, without it, to a
// host's API: onBroker with the broker, closed after it, or onAPI with a client.
func (a *apiFlags) via(cmd *cobra.Command, onBroker func(*rabbitmq.Backend) error, onAPI func(*client) error) error {
	if a.backend == "" {
		c, err := a.client(cmd)
		if err != nil {
			return err
		}
		return onAPI(c)
	}
	if !isAMQP(a.backend) {
		return usagef("--backend %q: want an amqp:// URL", a.backend)
	}
	b, err := openBackend(cmd.Context(), backendSpec{spec: a.backend}, nil)
	if err != nil {
		return err
	}
	defer b.Close(context.Background())
	return onBroker(b.(*rabbitmq.Backend))
}

func (a *apiFlags) addJSON(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&a.json, "json", false, "print the API's JSON instead of a table")
}

// call makes one request of the host's API for a command with --json, and hands what
// the host answered to show: printed says --json printed it, and otherwise out holds
// it for the command to print its own way.
func (a *apiFlags) call(cmd *cobra.Command, method, path string, query url.Values, body, out any) (printed bool, err error) {
	c, err := a.client(cmd)
	if err != nil {
		return false, err
	}
	var raw json.RawMessage
	if err := c.do(cmd.Context(), method, path, query, body, &raw); err != nil {
		return false, err
	}
	return a.show(cmd, raw, out)
}

// show prints raw, an answer of the API or one built like it, with --json and reports
// printed; without --json it decodes raw into out. Printing the JSON as it came keeps
// --json the API's own answer, fields the CLI does not know of included.
func (a *apiFlags) show(cmd *cobra.Command, raw json.RawMessage, out any) (printed bool, err error) {
	if a.json {
		return true, printJSON(cmd.OutOrStdout(), raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("decoding the API's answer: %w", err)
	}
	return false, nil
}

// client is a client of the HTTP API.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
	// trace is the caller's W3C trace context, from TRACEPARENT and TRACESTATE in the
	// environment (as a CI system or a traced script sets them): sent with every
	// request, so that the jobs it enqueues join the caller's trace.
	traceparent, tracestate string
}

func (a *apiFlags) client(cmd *cobra.Command) (*client, error) {
	if err := applyEnv(cmd); err != nil {
		return nil, err
	}
	u, err := url.Parse(a.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--server %q: want a URL such as http://127.0.0.1:8080", a.server)
	}
	return &client{base: u, token: a.token, http: &http.Client{Timeout: 60 * time.Second},
		traceparent: os.Getenv("TRACEPARENT"), tracestate: os.Getenv("TRACESTATE")}, nil
}

// apiError is an error answered by the API.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("server answered %d: %s", e.status, e.msg) }

// do sends a request with an optional JSON body and decodes a JSON answer into out.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.traceparent != "" {
		req.Header.Set("Traceparent", c.traceparent)
		if c.tracestate != "" {
			req.Header.Set("Tracestate", c.tracestate)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("cannot reach wasmjobs at %s (is `wasmjobs run` running? see --server): %v", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &apiError{resp.StatusCode, e.Error}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
	}
	return nil
}
