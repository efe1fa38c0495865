#!/usr/bin/env bash
# Installs the Debian packages the test suite needs, when they are missing:
#   bubblewrap                          real sandboxes (@dressage/paddock)
#   ripgrep                             opencode's grep tool inside sandboxes
#   python3-grpcio python3-protobuf     the Megatron worker's gRPC server and its tests
#   python3-numpy protobuf-compiler
#   protobuf-compiler-grpc
#   python3-torch                       the worker's torch actor and real CPU tensors for its slime stand-ins (~850 MB)
#   chromium                            the inspector's end-to-end test (driven by playwright-core)
# Runs apt-get as root, or through sudo when available.
set -euo pipefail

packages=(bubblewrap ripgrep python3-grpcio python3-protobuf python3-numpy protobuf-compiler protobuf-compiler-grpc python3-torch chromium)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  run=()
elif command -v sudo >/dev/null 2>&1; then
  run=(sudo)
else
  echo "install-system-packages: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-system-packages: installing ${missing[*]}"
"${run[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
