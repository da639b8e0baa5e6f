#!/usr/bin/env bash
# The test suite: unit tests (no privilege), integration tests on real files,
# and the CLI end to end. Tests that need root (drop_caches, running as
# another user) skip with a message outside CI; under CI=true they must run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
bash scripts/deps.sh
cargo test --workspace --release --locked "$@"
