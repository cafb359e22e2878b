# wasmjobs: build and test. `make help` lists the targets.
GO ?= go

.PHONY: help test vet build cover bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

test: vet ## vet, then every test with the race detector
	$(GO) test -race -count=1 ./...

vet: ## go vet
	$(GO) vet ./...

build: ## compile every package
	$(GO) build ./...

cover: ## coverage per package
	$(GO) test -count=1 -cover ./...

bench: ## Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...
