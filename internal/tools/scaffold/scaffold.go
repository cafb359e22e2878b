// Package scaffold makes new handler projects for `wasmjobs new`: a handler, a copy of
// its language's SDK, a manifest, a build script and a README, for Go, Rust, C,
// AssemblyScript, JavaScript and TypeScript.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
)

//go:embed templates sdk
var files embed.FS

// Languages are the languages New makes projects in.
var Languages = []string{"go", "rust", "c", "assemblyscript", "javascript", "typescript"}

// layout lists, per language, what goes where: a template (.tmpl) or an SDK copy.
var layout = map[string]map[string]string{
	"go": {
		"main.go": "templates/go/main.go.tmpl", "go.mod": "templates/go/go.mod.tmpl", "build.sh": "templates/go/build.sh.tmpl",
		"wasmjobs-sdk/go.mod": "sdk/go.mod.txt", "wasmjobs-sdk/abi.go": "sdk/go-abi.go.txt",
		"wasmjobs-sdk/wasmjobs.go": "sdk/go-wasmjobs.go.txt", "wasmjobs-sdk/job.go": "sdk/go-job.go.txt",
		"wasmjobs-sdk/imports_wasip1.go": "sdk/go-imports_wasip1.go.txt", "wasmjobs-sdk/host_other.go": "sdk/go-host_other.go.txt",
		"wasmjobs-sdk/trap.go": "sdk/go-trap.go.txt", "wasmjobs-sdk/trap_wasm.s": "sdk/go-trap_wasm.s.txt",
	},
	"c": {
		"{{.Name}}.c": "templates/c/main.c.tmpl", "build.sh": "templates/c/build.sh.tmpl", "wasmjobs.h": "sdk/wasmjobs.h.txt",
	},
	"rust": {
		"src/lib.rs": "templates/rust/lib.rs.tmpl", "build.sh": "templates/rust/build.sh.tmpl", "wasmjobs-sdk/lib.rs": "sdk/rust-lib.rs.txt",
	},
	"assemblyscript": {
		"assembly/index.ts": "templates/assemblyscript/index.ts.tmpl", "package.json": "templates/assemblyscript/package.json.tmpl",
		"build.sh": "templates/assemblyscript/build.sh.tmpl", "wasmjobs-sdk/index.ts": "sdk/as-index.ts.txt",
	},
	"javascript": jsLayout("js"),
	"typescript": jsLayout("ts"),
}

// jsLayout is a JavaScript or TypeScript project: the handler, the SDK (wasmjobs.js and
// its types) and the npm build command next to it.
func jsLayout(ext string) map[string]string {
	return map[string]string{
		"handler." + ext: "templates/js/handler.tmpl", "package.json": "templates/js/package.json.tmpl",
		"build.sh": "templates/js/build.sh.tmpl", "wasmjobs.js": "sdk/js-wasmjobs.js.txt",
		"wasmjobs.d.ts": "sdk/js-wasmjobs.d.ts.txt", "wasmjobs-build.mjs": "sdk/js-build.mjs.txt",
	}
}

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// New makes the project name in dir/name for lang. The name must be a lowercase word of
// letters, digits and dashes, starting with a letter (it names the module, its queue
// and its files); the directory must not exist.
func New(dir, lang, name string) (string, error) {
	files, ok := layout[lang]
	if !ok {
		return "", fmt.Errorf("unknown language %q: want one of %s", lang, strings.Join(Languages, ", "))
	}
	if !namePattern.MatchString(name) {
		return "", fmt.Errorf("invalid name %q: want a lowercase letter, then up to 62 lowercase letters, digits or dashes", name)
	}
	root := filepath.Join(dir, name)
	if _, err := os.Stat(root); err == nil {
		return "", fmt.Errorf("%s already exists", root)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	data := map[string]string{"Name": name, "Ident": strings.ReplaceAll(name, "-", "_"), "Lang": lang, "Ext": "js"}
	if lang == "typescript" {
		data["Ext"] = "ts"
	}
	all := map[string]string{"{{.Name}}.toml": "templates/manifest.toml.tmpl", "README.md": "templates/README.md.tmpl"}
	for k, v := range files {
		all[k] = v
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		content, err := render(all[p], data)
		if err != nil {
			return "", err
		}
		out, err := fileName(p, data)
		if err != nil {
			return "", err
		}
		full := filepath.Join(root, out)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(out, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(full, content, mode); err != nil {
			return "", err
		}
	}
	return root, nil
}

// render executes a template file, or returns an SDK copy as it is.
func render(src string, data map[string]string) ([]byte, error) {
	b, err := files.ReadFile(src)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(src, ".tmpl") {
		return b, nil
	}
	return execute(src, string(b), data)
}

// fileName fills a file name's template.
func fileName(name string, data map[string]string) (string, error) {
	b, err := execute(name, name, data)
	return string(b), err
}

func execute(name, text string, data map[string]string) ([]byte, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
