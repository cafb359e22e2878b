#!/usr/bin/env node
// wasmjobs-build: bundles a JavaScript or TypeScript handler with esbuild, checks its
// types with tsc when it is TypeScript, and writes one .wasm: the QuickJS engine of
// npm's quickjs-wasi with the bundle in the custom section "wasmjobs.js", which the
// wasmjobs host recognises (abi/SPEC.md, "JavaScript handlers").
//
//   node build.mjs handler.ts [-o handler.wasm] [--no-check]
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const SECTION = "wasmjobs.js";

function usage(msg) {
  if (msg) console.error(`wasmjobs-build: ${msg}`);
  console.error("usage: wasmjobs-build ENTRY.{js,ts} [-o OUT.wasm] [--no-check]");
  process.exit(2);
}

const args = process.argv.slice(2);
let entry, out, check = true;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "-o" || a === "--out") out = args[++i];
  else if (a === "--no-check") check = false;
  else if (a.startsWith("-")) usage(`unknown flag ${a}`);
  else if (entry) usage("one entry file only");
  else entry = a;
}
if (!entry) usage();
if (!existsSync(entry)) usage(`${entry}: no such file`);
out ??= entry.replace(/\.[cm]?[jt]sx?$/, "") + ".wasm";

// ENGINE_VERSION is the quickjs-wasi the host's adapter is built for
// (internal/tools/jsbuild.EngineVersion).
const ENGINE_VERSION = "3.7.0";

// The engine comes from the quickjs-wasi package the entry's project installed, else
// from this package's own dependency.
function engine() {
  for (const from of [path.resolve(entry), import.meta.url]) {
    try {
      const req = createRequire(from);
      const pkg = req.resolve("quickjs-wasi/package.json");
      const version = JSON.parse(readFileSync(pkg, "utf8")).version;
      if (version !== ENGINE_VERSION) {
        console.error(`wasmjobs-build: ${path.dirname(pkg)} is quickjs-wasi ${version}, want ${ENGINE_VERSION} (the host's adapter is built for it): run \`npm install quickjs-wasi@${ENGINE_VERSION}\``);
        process.exit(1);
      }
      return readFileSync(path.join(path.dirname(pkg), "quickjs.wasm"));
    } catch {}
  }
  console.error(`wasmjobs-build: the QuickJS engine is missing: run \`npm install quickjs-wasi@${ENGINE_VERSION}\` in the handler's project`);
  process.exit(1);
}

if (check && /\.[cm]?tsx?$/.test(entry)) {
  const req = createRequire(import.meta.url);
  const tsc = path.join(path.dirname(req.resolve("typescript/package.json")), "bin", "tsc");
  const r = spawnSync(process.execPath, [tsc, "--noEmit", "--strict", "--target", "es2023", "--module", "esnext",
    "--moduleResolution", "bundler", "--lib", "es2023", "--skipLibCheck", entry], { stdio: "inherit" });
  if (r.status !== 0) {
    console.error(`wasmjobs-build: ${entry}: type errors (tsc --noEmit)`);
    process.exit(1);
  }
}

const result = await build({
  entryPoints: [entry],
  bundle: true,
  write: false,
  format: "iife",
  globalName: "__wasmjobs_handler",
  target: "es2023",
  platform: "neutral",
  charset: "utf8",
  legalComments: "none",
  logLevel: "error",
});
const source = result.outputFiles[0].contents;

function uleb(n) {
  const b = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    b.push(byte);
  } while (n !== 0);
  return Buffer.from(b);
}
const name = Buffer.from(SECTION);
const body = Buffer.concat([uleb(name.length), name, Buffer.from(source)]);
const wasm = Buffer.concat([engine(), Buffer.from([0]), uleb(body.length), body]);
mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
writeFileSync(out, wasm);
console.log(`wasmjobs-build: wrote ${out} (${wasm.length} bytes, handler ${source.length} bytes)`);
