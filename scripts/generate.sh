#!/usr/bin/env bash
# Regenerates the Go code for the wire contract: proto/aion/v1/*.proto -> gen/aion/v1/.
#
# protoc comes from Debian (apt-get install -y protobuf-compiler); the Go plugins are the
# versions pinned as tools in go.mod, built here into a temporary directory. Running it twice
# gives byte-identical output. Set AION_PROTOC_ANY=1 to accept a protoc other than the pinned one
# (only the version line in the generated headers changes).
set -euo pipefail

PROTOC_VERSION="3.21.12" # libprotoc version the committed code was generated with

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! command -v protoc >/dev/null 2>&1; then
  echo "generate: protoc not found; install it with: apt-get install -y protobuf-compiler" >&2
  exit 1
fi
have="$(protoc --version | awk '{print $2}')"
if [[ "$have" != "$PROTOC_VERSION" && "${AION_PROTOC_ANY:-}" != "1" ]]; then
  echo "generate: protoc $have found, $PROTOC_VERSION expected (set AION_PROTOC_ANY=1 to use it anyway)" >&2
  exit 1
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc

out="gen"
pkg="$out/aion/v1"
mkdir -p "$pkg"
rm -f "$pkg"/*.pb.go

# -I proto makes the import paths aion/v1/*.proto; paths=source_relative then lands the files in
# gen/aion/v1/. Sorted input keeps the invocation stable.
mapfile -t protos < <(find proto/aion/v1 -name '*.proto' | LC_ALL=C sort)
protoc \
  -I proto \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  "${protos[@]}"

echo "generate: wrote $(ls "$pkg"/*.pb.go | wc -l) files to $pkg"
