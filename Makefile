# aion — build, test and lint. `make test` is what CI runs.
GO       ?= go
PKGS     ?= ./...
BENCHTIME ?= 1s

.PHONY: all build test lint fmt bench fuzz attack generate generate-check clean build-sqlite-drivers test-sqlite-drivers

all: build

build:
	$(GO) build -o bin/aion ./cmd/aion

## test: lint, then every test with the race detector.
test: lint
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

## lint: gofmt, go vet and staticcheck (pinned as a go.mod tool).
lint:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

## fuzz: each fuzz target for FUZZTIME (its seed corpus also runs in make test).
FUZZTIME ?= 15s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./internal/name/
	$(GO) test -run '^$$' -fuzz '^FuzzWorkerFrames$$' -fuzztime $(FUZZTIME) ./internal/server/
	$(GO) test -run '^$$' -fuzz '^FuzzWorkerStream$$' -fuzztime $(FUZZTIME) ./internal/server/
	$(GO) test -run '^$$' -fuzz '^FuzzFrameScan$$' -fuzztime $(FUZZTIME) ./internal/server/

## bench: the registry and store benchmarks, with allocations.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./internal/registry/

## attack: each attack of the hardening matrix for ATTACK_DURATION against a
## server it starts itself on loopback; the figures go in docs/security.md.
ATTACK_DURATION ?= 30s
ATTACK_KINDS ?= none unauth-large worker-fields stalled-reader pending-memory connections early-eof undecided refused-streams
attack: build
	@for k in $(ATTACK_KINDS); do echo "== aion attack $$k --duration $(ATTACK_DURATION)"; \
		./bin/aion attack $$k --duration $(ATTACK_DURATION) || exit 1; done

## generate: regenerate gen/ and sdk/python/aion/_gen/ from proto/ (needs protoc and the gRPC Python
## plugin: apt-get install -y protobuf-compiler protobuf-compiler-grpc).
generate:
	bash scripts/generate.sh

## generate-check: fail if the committed generated code differs from a fresh generate.
generate-check: generate
	@changed="$$(git status --porcelain -- gen/ sdk/python/aion/_gen/)"; \
	if [ -n "$$changed" ]; then echo "generated code differs from proto/:"; echo "$$changed"; git diff -- gen/ sdk/python/aion/_gen/ | head -50; exit 1; fi

## build-sqlite-drivers: bin/aion with each alternative SQLite driver (see
## docs/decisions/0001-embedded-sqlite-driver.md); the default build is modernc.org/sqlite.
## The cgo build needs a C compiler and compiles SQLite's C source once (cached).
build-sqlite-drivers:
	CGO_ENABLED=1 $(GO) build -tags aion_sqlite_cgo -o bin/aion-sqlite-cgo ./cmd/aion
	$(GO) build -tags aion_sqlite_ncruces -o bin/aion-sqlite-ncruces ./cmd/aion

## test-sqlite-drivers: the store's tests with each alternative SQLite driver. Not part
## of make test: it compiles the store twice more and runs its tests twice more.
test-sqlite-drivers:
	CGO_ENABLED=1 $(GO) test -race -count=1 -tags aion_sqlite_cgo ./internal/store/...
	$(GO) test -race -count=1 -tags aion_sqlite_ncruces ./internal/store/...
	$(GO) vet -tags aion_sqlite_cgo ./internal/store/sqlite/
	$(GO) vet -tags aion_sqlite_ncruces ./internal/store/sqlite/

clean:
	rm -rf bin
