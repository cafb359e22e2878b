#!/usr/bin/env bash
# make run: builds wasmjobs and the example handler, starts `wasmjobs run` on its durable
# default backend (data in .run/data) with the example in .run/modules, enqueues a few
# demo jobs and shows them processed. The host then keeps running in the foreground until
# Ctrl-C; jobs still queued then are there at the next `make run`.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export WASMJOBS_SERVER="http://${WASMJOBS_LISTEN:-127.0.0.1:8080}"

echo "== building bin/wasmjobs and the example handler (examples/greet-go)"
$GO build -o bin/wasmjobs ./cmd/wasmjobs
(cd examples/greet-go && GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o greet-go.wasm .)
mkdir -p .run/modules
cp examples/greet-go/greet-go.wasm examples/greet-go/greet-go.toml .run/modules/

echo "== starting: bin/wasmjobs run --modules .run/modules --data-dir .run/data --backup-dir .run/backups"
bin/wasmjobs run --modules .run/modules --data-dir .run/data --backup-dir .run/backups --listen "${WASMJOBS_LISTEN:-127.0.0.1:8080}" &
pid=$!
# Ctrl-C reaches the host from the terminal: wait for its drain. A TERM to this script is
# passed on. Leaving in any other way stops the host too.
trap 'wait $pid 2>/dev/null; exit 130' INT
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; exit 143' TERM
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  bin/wasmjobs queues list >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "wasmjobs run stopped; see above"; exit 1; }
  sleep 0.1
done

echo "== enqueuing three demo jobs"
ids=()
for payload in '{"name":"Ada","lang":"fr"}' '{"name":"Grace","lang":"de"}' 'not json at all'; do
  id=$(bin/wasmjobs enqueue greet "$payload")
  echo "   $id  $payload"
  ids+=("$id")
done
for id in "${ids[@]}"; do
  for _ in $(seq 50); do
    state=$(bin/wasmjobs jobs get "$id")
    grep -q '"state": "\(succeeded\|dead\)"' <<<"$state" && break
    sleep 0.1
  done
  echo "== job $id"
  grep -E '"(state|output|reason|version)"' <<<"$state" || true
done
bin/wasmjobs queues list

cat <<MSG

wasmjobs is running with the handler in .run/modules. In another terminal, try:
  bin/wasmjobs enqueue greet '{"name":"Linus","lang":"es"}'
  bin/wasmjobs modules list
  bin/wasmjobs dlq list greet
  bin/wasmjobs backup nightly-\$(date +%s)        # into .run/backups/
Ctrl-C drains and stops it; what is queued stays in .run/data for the next start.
MSG
wait $pid
