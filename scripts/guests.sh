#!/usr/bin/env bash
# make guests: builds every guest SDK's conformance handler and every example handler
# into build/guests/, with the toolchains of the machine: Go (always), clang + wasi-libc
# (C), Debian's rustc with the wasm32 standard library (Rust), Node.js with the pinned
# AssemblyScript (npm ci), and for JavaScript/TypeScript the pinned QuickJS engine,
# esbuild and TypeScript (npm ci in guest-sdk/javascript). A missing toolchain is an error that names the package.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OUT=build/guests
mkdir -p "$OUT"
RUSTC=${RUSTC:-/usr/bin/rustc}

need() { command -v "$1" >/dev/null 2>&1 || { echo "make guests: $1 not found: $2" >&2; exit 1; }; }

echo "== Go"
(cd guest-sdk/go/conformance && GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o "../../../$OUT/go-conformance.wasm" .)
(cd examples/greet-go && GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o "../../$OUT/greet-go.wasm" .)
(cd examples/deliver-webhook && GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o "../../$OUT/deliver-webhook.wasm" .)

echo "== C"
need clang "apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32"
CC_WASM="clang --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Werror -Iguest-sdk/c"
$CC_WASM -o "$OUT/c-conformance.wasm" guest-sdk/c/conformance/conformance.c
$CC_WASM -o "$OUT/wordcount-c.wasm" examples/wordcount-c/wordcount.c
echo "   the SDK's own tests, natively, under AddressSanitizer and UBSan:"
clang -fsanitize=address,undefined -fno-sanitize-recover=all -g -Wall -Werror -Wno-unknown-attributes -Iguest-sdk/c -o build/c-sdk-test guest-sdk/c/test/sdk_test.c
build/c-sdk-test

echo "== Rust"
[ -x "$RUSTC" ] || { echo "make guests: $RUSTC not found: apt-get install rustc libstd-rust-dev-wasm32" >&2; exit 1; }
RFLAGS="--edition 2021 -O -C strip=debuginfo"
for target in wasm32-unknown-unknown wasm32-wasi; do
  $RUSTC $RFLAGS --crate-type rlib --crate-name wasmjobs --target $target -o "build/libwasmjobs-$target.rlib" guest-sdk/rust/src/lib.rs
done
$RUSTC $RFLAGS --crate-type cdylib --crate-name conformance --target wasm32-unknown-unknown \
  --extern wasmjobs=build/libwasmjobs-wasm32-unknown-unknown.rlib -o "$OUT/rust-conformance.wasm" guest-sdk/rust/conformance/main.rs
$RUSTC $RFLAGS --crate-type cdylib --crate-name webhook --target wasm32-wasi \
  --extern wasmjobs=build/libwasmjobs-wasm32-wasi.rlib -o "$OUT/webhook-rust.wasm" examples/webhook-rust/src/lib.rs
echo "   the SDK's own tests, natively:"
$RUSTC --edition 2021 --test --crate-name wasmjobs -o build/rust-sdk-test guest-sdk/rust/src/lib.rs
build/rust-sdk-test -q

echo "== AssemblyScript"
need npm "install Node.js and npm"
(cd guest-sdk/assemblyscript && npm ci --no-audit --no-fund --loglevel=error)
ASC=guest-sdk/assemblyscript/node_modules/.bin/asc
$ASC guest-sdk/assemblyscript/conformance/conformance.ts -o "$OUT/assemblyscript-conformance.wasm" --optimize --runtime incremental
$ASC examples/render-email-as/assembly/index.ts -o "$OUT/render-email-as.wasm" --optimize --runtime incremental
echo "   the SDK's own tests, in Node.js:"
node guest-sdk/assemblyscript/test/run.mjs "$OUT/assemblyscript-conformance.wasm"

echo "== TypeScript (QuickJS from npm's quickjs-wasi, bundled with esbuild)"
(cd guest-sdk/javascript && npm ci --no-audit --no-fund --loglevel=error)
JSBUILD="node guest-sdk/javascript/build.mjs"
$JSBUILD guest-sdk/javascript/conformance/conformance.ts -o "$OUT/typescript-conformance.wasm"
$JSBUILD guest-sdk/javascript/bench/json.ts -o "$OUT/typescript-json.wasm"
for ex in examples/*-ts; do
  [ -d "$ex" ] || continue
  name=$(basename "$ex")
  $JSBUILD "$ex/handler.ts" -o "$OUT/$name.wasm"
done

ls -la "$OUT"
