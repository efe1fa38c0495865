#!/bin/sh
# Generates the Python gRPC stubs of TrainerService from @dressage/protocol's trainer.proto into
# build/gen (never committed). Needs Debian's protobuf-compiler and protobuf-compiler-grpc; the older
# python3-grpc-tools bundles a protoc that rejects proto3 `optional` fields.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
proto_root="$here/../../packages/protocol/proto"
out="$here/build/gen"
plugin=$(command -v grpc_python_plugin || true)
if [ -z "$plugin" ]; then
  echo "grpc_python_plugin not found: apt-get install protobuf-compiler protobuf-compiler-grpc" >&2
  exit 1
fi
mkdir -p "$out"
protoc -I "$proto_root" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" dressage/trainer/v1/trainer.proto
for dir in "$out/dressage" "$out/dressage/trainer" "$out/dressage/trainer/v1"; do
  touch "$dir/__init__.py"
done
