// Package jsbuild makes the module of a JavaScript or TypeScript handler: the QuickJS
// engine of npm's quickjs-wasi, found in the project's node_modules, with the handler
// bundled by esbuild into the custom section the host recognises (host.JSSection).
// guest-sdk/javascript/build.mjs does the same with Node.js; this is `wasmjobs build`.
package jsbuild

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/evanw/esbuild/pkg/api"
)

// Section is the custom section that holds the handler's bundle (host.JSSection).
const Section = "wasmjobs.js"

// EngineVersion is the quickjs-wasi release the host's adapter is written against.
const EngineVersion = "3.7.0"

// ErrNoEngine is returned when no quickjs-wasi engine is installed near the handler.
var ErrNoEngine = errors.New("the QuickJS engine (npm quickjs-wasi) is not installed")

// FindEngine returns the path of quickjs.wasm in the node_modules of dir or of a
// directory above it, as Node.js resolves packages. Its error names the npm command
// that installs it.
func FindEngine(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		pkg := filepath.Join(d, "node_modules", "quickjs-wasi")
		p := filepath.Join(pkg, "quickjs.wasm")
		if _, err := os.Stat(p); err == nil {
			if v, err := packageVersion(filepath.Join(pkg, "package.json")); err != nil || v != EngineVersion {
				if err == nil {
					err = fmt.Errorf("version %s", v)
				}
				return "", fmt.Errorf("%w: %s has %v, want quickjs-wasi %s (the host's adapter is built for it): run `npm install quickjs-wasi@%s` there",
					ErrEngineVersion, pkg, err, EngineVersion, EngineVersion)
			}
			return p, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("%w in %s or above it: run `npm install quickjs-wasi@%s` there (or `npm ci` in a project made by `wasmjobs new`)",
		ErrNoEngine, abs, EngineVersion)
}

// Bundle bundles the entry file and what it imports into one script that sets the
// global __wasmjobs_handler to the entry's exports, as the host's prelude expects.
func Bundle(entry string) ([]byte, error) {
	res := api.Build(api.BuildOptions{
		EntryPoints:   []string{entry},
		Bundle:        true,
		Write:         false,
		Format:        api.FormatIIFE,
		GlobalName:    "__wasmjobs_handler",
		Target:        api.ES2023,
		Platform:      api.PlatformNeutral,
		Charset:       api.CharsetUTF8,
		LegalComments: api.LegalCommentsNone,
		LogLevel:      api.LogLevelSilent,
	})
	if len(res.Errors) > 0 {
		msgs := api.FormatMessages(res.Errors, api.FormatMessagesOptions{Kind: api.ErrorMessage})
		return nil, fmt.Errorf("bundling %s:\n%s", entry, strings.TrimSpace(strings.Join(msgs, "")))
	}
	if len(res.OutputFiles) != 1 {
		return nil, fmt.Errorf("bundling %s: esbuild wrote %d files, want 1", entry, len(res.OutputFiles))
	}
	return res.OutputFiles[0].Contents, nil
}

// Module returns the engine with source appended in the custom section Section.
func Module(engine, source []byte) []byte {
	var name, body, out bytes.Buffer
	name.Write(binary.AppendUvarint(nil, uint64(len(Section))))
	name.WriteString(Section)
	body.Write(name.Bytes())
	body.Write(source)
	out.Grow(len(engine) + body.Len() + 8)
	out.Write(engine)
	out.WriteByte(0) // a custom section
	out.Write(binary.AppendUvarint(nil, uint64(body.Len())))
	out.Write(body.Bytes())
	return out.Bytes()
}

// TypeCheck runs the project's TypeScript compiler (tsc --noEmit) on a .ts entry,
// found in node_modules like the engine; checked is false when none is installed.
func TypeCheck(entry string) (checked bool, err error) {
	if !strings.HasSuffix(entry, ".ts") && !strings.HasSuffix(entry, ".mts") {
		return false, nil
	}
	abs, err := filepath.Abs(entry)
	if err != nil {
		return false, err
	}
	var tsc string
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		p := filepath.Join(d, "node_modules", "typescript", "bin", "tsc")
		if _, err := os.Stat(p); err == nil {
			tsc = p
			break
		}
		if filepath.Dir(d) == d {
			return false, nil
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return false, nil
	}
	cmd := exec.Command(node, tsc, "--noEmit", "--strict", "--target", "es2023", "--module", "esnext",
		"--moduleResolution", "bundler", "--lib", "es2023", "--skipLibCheck", abs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return true, fmt.Errorf("type errors in %s (tsc --noEmit):\n%s", entry, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// Build bundles entry, checks its types when tsc is installed, and returns the module
// made with the engine found near entry.
func Build(entry string) (wasm []byte, checked bool, err error) {
	if _, err := os.Stat(entry); err != nil {
		return nil, false, err
	}
	enginePath, err := FindEngine(filepath.Dir(entry))
	if err != nil {
		return nil, false, err
	}
	engine, err := os.ReadFile(enginePath)
	if err != nil {
		return nil, false, err
	}
	if checked, err = TypeCheck(entry); err != nil {
		return nil, checked, err
	}
	src, err := Bundle(entry)
	if err != nil {
		return nil, checked, err
	}
	return Module(engine, src), checked, nil
}

// ErrEngineVersion is a quickjs-wasi package of another version than EngineVersion.
var ErrEngineVersion = errors.New("wrong QuickJS engine version")

// packageVersion reads the version field of an npm package.json.
func packageVersion(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return pkg.Version, nil
}
