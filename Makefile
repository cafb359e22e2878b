# wasmjobs: build and test. `make help` lists the targets.
GO ?= go

.PHONY: screenshots help broker cluster postgres fuzz guests gobench run test test-otel vet build cover bench bench-http bench-river testdata testdata-check examples soak

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

broker: ## start a throwaway RabbitMQ on loopback (apt-get installs it if missing); prints its URL
	@scripts/rabbitmq.sh start

cluster: ## start a three-node RabbitMQ cluster on loopback (ports 5701-5703); prints its URLs
	@scripts/rabbitmq-cluster.sh start

postgres: ## start Debian's PostgreSQL without systemd (apt-get installs it if missing) with a database river; prints its URL
	@scripts/postgres.sh start

run: ## build, start wasmjobs run with the example handler, enqueue demo jobs; Ctrl-C stops
	GO=$(GO) scripts/demo.sh

PG_FLEET_TESTS = TestPostgresTwoHostsOneKilled|TestPostgresStoppedForTwentySeconds|TestPostgresUniqueAcrossTwoHosts

test: vet ## vet, then every test with the race detector (RabbitMQ's with WASMJOBS_AMQP_URL set, the cluster test with WASMJOBS_AMQP_CLUSTER, PostgreSQL's with WASMJOBS_PG_URL)
	@# -timeout 30m: cmd/wasmjobs runs real hosts, builds Go guests and takes 8-10 min on
	@# a loaded two-core machine, near go test's default of 10 min.
	$(GO) test -race -count=1 -timeout 30m -skip 'TestBrokerRestart|$(PG_FLEET_TESTS)' ./...
	@# The PostgreSQL fleet tests (real hosts, thousands of jobs, a database stopped for
	@# 20 s) run on their own: beside the host package's timing tests on two cores, their
	@# load made those miss their bounds (a cancel seen 150 ms late).
	$(GO) test -race -count=1 -timeout 30m -run '$(PG_FLEET_TESTS)' ./cmd/wasmjobs/
	cd guest-sdk/go && $(GO) test -race -count=1 ./...
	@# The River peer is a module of its own; its Postgres test runs with WASMJOBS_PG_URL set.
	cd internal/tools/bench/riverpeer && $(GO) test -race -count=1 ./...
	@# The broker-restart tests run alone: a restart would cut every other test's connection.
	@# They restart the broker scripts/rabbitmq.sh names, so they run only with the opt-in
	@# WASMJOBS_RABBIT_RESTART=1 (set here): point WASMJOBS_AMQP_URL and WASMJOBS_RABBIT_*
	@# at a broker of your own, never at a shared one.
	WASMJOBS_RABBIT_RESTART=1 $(GO) test -race -count=1 -timeout 30m -p 1 -run 'TestBrokerRestart' -v ./backend/rabbitmq/ ./cmd/wasmjobs/

test-otel: ## the end-to-end trace tests: the built binary against the OpenTelemetry Collector's OTLP receiver (test/otel, a module of its own; needs wat2wasm, RabbitMQ's row WASMJOBS_AMQP_URL)
	cd test/otel && $(GO) test -race -count=1 ./...

vet: ## go vet, here and in the Go guest SDK and examples (built for wasip1)
	$(GO) vet ./...
	cd guest-sdk/go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./... && $(GO) vet ./...
	cd guest-sdk/go/conformance && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd examples/greet-go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd examples/deliver-webhook && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd internal/tools/bench/riverpeer && $(GO) vet ./...
	cd test/otel && $(GO) vet ./...

build: ## build the wasmjobs command into bin/
	$(GO) build -o bin/wasmjobs ./cmd/wasmjobs

cover: ## coverage per package
	$(GO) test -count=1 -cover ./...

bench: guests build ## run the benchmark matrix, each row its own bin/wasmjobs process, and replace its generated sections of BENCHMARKS.md in place, keeping the ones measured by hand (RabbitMQ rows need WASMJOBS_AMQP_URL; River rows WASMJOBS_PG_URL or a local postgresql)
	$(GO) run ./internal/tools/bench/report -bin bin/wasmjobs BENCHMARKS.md

bench-http: guests build ## the outbound HTTP rows alone (one GET a job to a server answering after 50 ms, concurrency 256 and 1,000, each SDK, native, River): replaces their section of BENCHMARKS.md
	$(GO) run ./internal/tools/bench/report -bin bin/wasmjobs -http BENCHMARKS.md

bench-river: ## River on PostgreSQL, the peer, alone: -n 200000, then --duration 30s (starts Postgres with scripts/postgres.sh)
	@url=$${WASMJOBS_PG_URL:-$$(scripts/postgres.sh start)} && cd internal/tools/bench/riverpeer && \
	$(GO) run . -n 200000 --database-url "$$url" && $(GO) run . --duration 30s --database-url "$$url"

gobench: ## the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

WAT := $(wildcard testdata/*/*.wat)

testdata: $(WAT:.wat=.wasm) ## build testdata's WAT modules into .wasm (needs wabt's wat2wasm)

testdata/%.wasm: testdata/%.wat
	wat2wasm $< -o $@

testdata-check: ## fail if a committed .wasm differs from its WAT source
	@tmp=$$(mktemp -d); status=0; \
	for f in $(WAT); do wat2wasm $$f -o $$tmp/out.wasm && cmp -s $$tmp/out.wasm $${f%.wat}.wasm || { echo "stale: $${f%.wat}.wasm (run make testdata)"; status=1; }; done; \
	rm -rf $$tmp; exit $$status

guests: ## build every SDK's conformance handler and every example into build/guests (needs clang, rustc, npm)
	GO=$(GO) scripts/guests.sh

examples: ## build the Go example handler (the plain toolchain)
	cd examples/greet-go && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o greet-go.wasm .

SOAK_RUNS ?= 1000

soak: ## run every hostile module and hostile HTTP case (with its loopback servers) SOAK_RUNS (1,000) times next to normal jobs, with and without -race
	WASMJOBS_HOSTILE_RUNS=$(SOAK_RUNS) $(GO) test -count=1 -timeout 30m -run TestHostileModulesNeverTakeTheHostDown -v ./host/
	WASMJOBS_HOSTILE_RUNS=$(SOAK_RUNS) $(GO) test -race -count=1 -timeout 60m -run TestHostileModulesNeverTakeTheHostDown -v ./host/

FUZZTIME ?= 20s
# Each target's own budget, FUZZTIME unless set: a time (20s) or a count of inputs (5000x).
# CI gives counts: with a time, Go before 1.27 can fail a target with a bare "context
# deadline exceeded" when the time runs out while a worker is busy (golang/go#75804; seen
# here on a loaded machine, no input written), and a count has no deadline to race.
FUZZTIME_DECODE ?= $(FUZZTIME)
FUZZTIME_MANIFEST ?= $(FUZZTIME)
FUZZTIME_POINTERS ?= $(FUZZTIME)

fuzz: ## run each fuzz target for FUZZTIME (crashers land in the package's testdata/fuzz and stay as regression cases)
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME_DECODE) ./backend/rabbitmq/
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(FUZZTIME_MANIFEST) ./host/
	$(GO) test -run '^$$' -fuzz '^FuzzHostFunctionPointers$$' -fuzztime $(FUZZTIME_POINTERS) ./host/

screenshots: build ## start a real run, enqueue jobs, and save PNGs of the dashboard into docs/screenshots (needs chromium)
	$(GO) run ./internal/app/ui/screenshots -bin bin/wasmjobs -out docs/screenshots
