package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmjobs/wasmjobs/host"
	"github.com/wasmjobs/wasmjobs/internal/app/fleet"
)

// fleetFlags are the flags of the commands that talk to the modules stream.
type fleetFlags struct {
	backend string
	stream  string
	signKey string
}

func (ff *fleetFlags) add(cmd *cobra.Command, sign bool) {
	cmd.Flags().StringVar(&ff.backend, "backend", "", "the RabbitMQ broker of the fleet: amqp://user:pass@host:5672/vhost, or its nodes' URLs comma-separated; pushing needs the broker's credentials (env WASMJOBS_BACKEND)")
	cmd.Flags().StringVar(&ff.stream, "stream", fleet.DefaultStream, "the modules stream the hosts follow (env WASMJOBS_MODULE_STREAM)")
	if sign {
		cmd.Flags().StringVar(&ff.signKey, "sign-key", "", "sign with this ed25519 private key (made by `wasmjobs modules keygen`); hosts started with --trust-key take only pushes it signed")
	}
}

// resolve fills unset flags from the environment and checks --backend.
func (ff *fleetFlags) resolve(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("backend") && ff.backend == "" {
		ff.backend = os.Getenv("WASMJOBS_BACKEND")
	}
	if !cmd.Flags().Changed("stream") {
		if s := os.Getenv("WASMJOBS_MODULE_STREAM"); s != "" {
			ff.stream = s
		}
	}
	if !isAMQP(ff.backend) {
		return usagef("--backend %q: want the fleet's RabbitMQ broker, amqp://...", redact(ff.backend))
	}
	if ff.stream == "" {
		return usagef("--stream is empty: name the modules stream")
	}
	return nil
}

// sign signs p with --sign-key, if given.
func (ff *fleetFlags) sign(p *fleet.Push) error {
	if ff.signKey == "" {
		return nil
	}
	key, err := fleet.ReadPrivateKey(ff.signKey)
	if err != nil {
		return usagef("--sign-key: %v", err)
	}
	p.Sign(key)
	return nil
}

// publish sends p to the stream of --backend.
func (ff *fleetFlags) publish(ctx context.Context, p fleet.Push) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := fleet.Dial(ctx, amqpURLs(ff.backend))
	if err != nil {
		return fmt.Errorf("%s: %w", redact(ff.backend), err)
	}
	defer conn.Close()
	return fleet.Publish(ctx, conn, ff.stream, p)
}

func newModulesFleetCommands(g *globals) []*cobra.Command {
	pf := &fleetFlags{}
	var manifestPath string
	push := &cobra.Command{
		Use:   "push FILE.wasm",
		Short: "Validate a module and push it to every host on a RabbitMQ broker",
		Long: `push validates FILE.wasm as 'modules validate' does (with --manifest, or NAME.toml
beside it), then publishes it to the broker's modules stream (--stream), which every
'wasmjobs run' on that broker follows: each writes it into its modules directory as
NAME.wasm and NAME.toml, over a local file of that name, and swaps to it as to a local
change (validation, canary and rollback, history). A host started later reads the
stream before it serves. Pushing needs the broker's credentials: whoever can publish
there can run code on every host, unless the hosts take only signed pushes
(--sign-key here, --trust-key on the hosts). A module over 128 MiB (RabbitMQ's
default max_message_size) is refused.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pf.resolve(cmd); err != nil {
				return err
			}
			path := args[0]
			name := moduleName(path)
			if err := fleet.CheckName(name); err != nil {
				return usagef("%s: %v", path, err)
			}
			wasm, err := os.ReadFile(path)
			if err != nil {
				return usagef("%v", err)
			}
			if manifestPath == "" {
				manifestPath = host.ManifestPath(path)
			}
			manText, err := os.ReadFile(manifestPath)
			if err != nil && !os.IsNotExist(err) || err != nil && cmd.Flags().Changed("manifest") {
				return usagef("--manifest: %v", err)
			}
			if size := len(wasm) + len(manText); size > fleet.MaxMessageSize-64<<10 {
				return usagef("%s: %v (%d bytes)", path, fleet.ErrTooBig, size)
			}
			ctx := cmd.Context()
			man, err := host.ParseManifest(manifestPath, manText)
			if err != nil {
				return fmt.Errorf("%w %s: %v", host.ErrInvalidModule, name, err)
			}
			e, err := g.engine(ctx)
			if err != nil {
				return err
			}
			defer e.Close(ctx)
			m, err := e.Load(ctx, name, wasm, man)
			if err != nil {
				return err
			}
			m.Retire()
			p := fleet.Push{Kind: fleet.KindModule, Name: name, Version: host.VersionOf(wasm, manText), Manifest: manText, Wasm: wasm, PushedAt: time.Now()}
			if err := pf.sign(&p); err != nil {
				return err
			}
			if err := pf.publish(ctx, p); err != nil {
				return err
			}
			signed := "unsigned"
			if len(p.Signature) > 0 {
				signed = "signed"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pushed %s version %s (%s) to %s\n", name, p.Version, signed, pf.stream)
			return nil
		},
	}
	pf.add(push, true)
	push.Flags().StringVar(&manifestPath, "manifest", "", "the module's manifest (default: NAME.toml beside FILE.wasm, if there)")

	rf := &fleetFlags{}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a pushed module from every host on a RabbitMQ broker",
		Long: `remove publishes a tombstone for NAME on the modules stream: every host following it
deletes NAME.wasm and NAME.toml from its modules directory, and a host started later
does not write it back. Signed as push is, with --sign-key.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rf.resolve(cmd); err != nil {
				return err
			}
			name := args[0]
			if err := fleet.CheckName(name); err != nil {
				return usagef("%v", err)
			}
			p := fleet.Push{Kind: fleet.KindRemove, Name: name, PushedAt: time.Now()}
			if err := rf.sign(&p); err != nil {
				return err
			}
			if err := rf.publish(cmd.Context(), p); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s on %s\n", name, rf.stream)
			return nil
		},
	}
	rf.add(remove, true)

	keygen := &cobra.Command{
		Use:   "keygen FILE",
		Short: "Make an ed25519 key pair for signing pushes: FILE (private) and FILE.pub",
		Long: `keygen writes a new ed25519 private key to FILE (mode 0600) and its public key to
FILE.pub, and refuses to overwrite either. Each file is one line: "wasmjobs-ed25519-private "
or "wasmjobs-ed25519-public " and the standard base64 of the 32-byte seed or public key.
Push with --sign-key FILE; start hosts with --trust-key FILE.pub.`,
		Args: argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fleet.GenerateKey(args[0]); err != nil {
				return usagef("%v", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s.pub\n", args[0], args[0])
			return nil
		},
	}
	return []*cobra.Command{push, remove, keygen}
}

// fleetList prints, per module, the version each host on the broker serves.
func fleetList(cmd *cobra.Command, backend, stream string, window time.Duration, asJSON bool) error {
	if !cmd.Flags().Changed("stream") {
		if s := os.Getenv("WASMJOBS_MODULE_STREAM"); s != "" {
			stream = s
		}
	}
	if !isAMQP(backend) {
		return usagef("--backend %q: want the fleet's RabbitMQ broker, amqp://...", redact(backend))
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	conn, err := fleet.Dial(ctx, amqpURLs(backend))
	if err != nil {
		return fmt.Errorf("%s: %w", redact(backend), err)
	}
	defer conn.Close()
	hbs, err := fleet.ReadHeartbeats(ctx, conn, stream, window)
	if err != nil {
		return err
	}
	type row struct {
		Module   string            `json:"module"`
		Versions map[string]string `json:"versions"` // host -> version
		Drift    bool              `json:"drift"`
	}
	byModule := map[string]map[string]string{}
	hosts := []string{}
	for id, hb := range hbs {
		hosts = append(hosts, id)
		for m, v := range hb.Modules {
			if byModule[m] == nil {
				byModule[m] = map[string]string{}
			}
			byModule[m][id] = v
		}
	}
	slices.Sort(hosts)
	var rows []row
	for m, vs := range byModule {
		seen := map[string]bool{}
		for _, v := range vs {
			seen[v] = true
		}
		rows = append(rows, row{Module: m, Versions: vs, Drift: len(seen) > 1 || len(vs) < len(hosts)})
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.Module, b.Module) })
	if asJSON {
		raw, err := json.Marshal(map[string]any{"hosts": hosts, "modules": rows})
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), raw)
	}
	tw := table(cmd.OutOrStdout())
	fmt.Fprintln(tw, "MODULE\tHOST\tVERSION\tDRIFT")
	for _, r := range rows {
		for _, h := range hosts {
			v, ok := r.Versions[h]
			if !ok {
				v = "-"
			}
			drift := ""
			if r.Drift {
				drift = "drift"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Module, h, short(v), drift)
		}
	}
	return tw.Flush()
}

// readTrustKey reads --trust-key, or returns nil when it is empty.
func readTrustKey(path string) (ed25519.PublicKey, error) {
	if path == "" {
		return nil, nil
	}
	k, err := fleet.ReadPublicKey(path)
	if err != nil {
		return nil, usagef("--trust-key: %v", err)
	}
	return k, nil
}
