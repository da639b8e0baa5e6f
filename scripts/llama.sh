#!/usr/bin/env bash
# Installs the real llama.cpp runtime for `predictio bench llm-load` and the
# `predictio run` demo: node-llama-cpp (pinned) and its prebuilt CPU binaries
# (@node-llama-cpp/linux-x64) from the npm registry, outside the repository
# (default /var/tmp/predictio-llama/node, or $1). Idempotent.
#
# Nothing is downloaded from anywhere else and nothing is built: the
# package's postinstall (which may fetch or compile llama.cpp) is not run
# (--ignore-scripts), NODE_LLAMA_CPP_SKIP_DOWNLOAD is set, and the loader
# (scripts/llama-load.mjs) asks for build "never". Needs node >= 20 and npm.
# Not needed by the test suite or CI.
set -euo pipefail
VERSION=3.21.1
DIR="${1:-${NODE_LLAMA_CPP_DIR:-/var/tmp/predictio-llama/node}}"
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
command -v node >/dev/null || { echo "llama.sh: node (>= 20) is needed" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
if [ -f node_modules/node-llama-cpp/package.json ] &&
  grep -q "\"version\": \"$VERSION\"" node_modules/node-llama-cpp/package.json &&
  [ -d node_modules/@node-llama-cpp/linux-x64/bins ]; then
  echo "node-llama-cpp $VERSION already installed in $DIR"
  exit 0
fi
[ -f package.json ] || echo '{"name":"predictio-llama-runtime","private":true}' >package.json
npm install --save-exact --ignore-scripts --no-audit --no-fund "node-llama-cpp@$VERSION"
[ -d node_modules/@node-llama-cpp/linux-x64/bins ] || {
  echo "llama.sh: the prebuilt binaries (@node-llama-cpp/linux-x64) were not installed" >&2
  exit 1
}
echo "node-llama-cpp $VERSION installed in $DIR"
