#!/usr/bin/env bash
# Regenerates the code for the wire contract from proto/aion/v1/*.proto:
#   Go:     gen/aion/v1/*.pb.go
#   Python: sdk/python/aion/_gen/v1/*_pb2.py, *_pb2.pyi, *_pb2_grpc.py (the Python SDK's stubs)
#
# protoc comes from Debian (apt-get install -y protobuf-compiler); the Go plugins are the
# versions pinned as tools in go.mod, built here into a temporary directory; the Python gRPC
# plugin is Debian's grpc_python_plugin (apt-get install -y protobuf-compiler-grpc). Running it twice
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

if ! command -v grpc_python_plugin >/dev/null 2>&1; then
  echo "generate: grpc_python_plugin not found; install it with: apt-get install -y protobuf-compiler-grpc" >&2
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

# Python: protoc writes aion/v1/*_pb2*.py{,i} whose imports say "from aion.v1 import ..."; the
# SDK keeps them in its package as aion._gen.v1, so those imports are rewritten to
# "from aion._gen.v1 import ...". The descriptors keep their proto paths (aion/v1/*.proto).
pyout="sdk/python/aion/_gen"
pytmp="$(mktemp -d)"
trap 'rm -rf "$bin" "$pytmp"' EXIT
protoc \
  -I proto \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
  --python_out="$pytmp" --pyi_out="$pytmp" --grpc_python_out="$pytmp" \
  "${protos[@]}"
rm -rf "$pyout"
mkdir -p "$pyout/v1"
for f in "$pytmp"/aion/v1/*; do
  sed -e 's/^from aion\.v1 import /from aion._gen.v1 import /' "$f" >"$pyout/v1/$(basename "$f")"
done
printf '"""Code generated from proto/ by scripts/generate.sh. DO NOT EDIT."""\n' >"$pyout/__init__.py"
printf '"""Code generated from proto/aion/v1 by scripts/generate.sh. DO NOT EDIT."""\n' >"$pyout/v1/__init__.py"
echo "generate: wrote $(ls "$pyout"/v1/*.py* | wc -l) files to $pyout/v1"
