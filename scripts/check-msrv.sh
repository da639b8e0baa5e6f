#!/usr/bin/env bash
# Checks the workspace's declared minimum Rust (`rust-version`) against what
# the code and its dependencies need. Fails when a workspace crate declares no
# rust-version, or one lower than:
#  - 1.88, the first Rust with let chains in edition 2024 (which the code
#    uses), or
#  - the rust-version of any package in Cargo.lock, all platforms and
#    dev/build dependencies included (from `cargo metadata`).
#
# This is a static check: no other toolchain can be downloaded where it runs,
# so the code is not compiled with the declared version. Use of std APIs newer
# than it is caught by clippy's `incompatible_msrv` lint, which CI runs with
# -D warnings.
set -euo pipefail
cd "$(dirname "$0")/.."

# Let chains (edition 2024) are stable since Rust 1.88.
floor=1.88

python3 - "$floor" <<'EOF'
import json, subprocess, sys

floor = sys.argv[1]


def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


meta = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
)
members = set(meta["workspace_members"])
deps = [p for p in meta["packages"] if p["id"] not in members and p.get("rust_version")]
need = version(floor)
reason = f"{floor} (let chains in edition 2024)"
if deps:
    top = max(deps, key=lambda p: version(p["rust_version"]))
    needs = "{} {} needs {}".format(top["name"], top["version"], top["rust_version"])
    if version(top["rust_version"]) > need:
        need = version(top["rust_version"])
        reason = "{} ({})".format(top["rust_version"], needs)
    else:
        reason = f"{floor} (let chains in edition 2024; {needs})"

failed = False
for p in meta["packages"]:
    if p["id"] not in members:
        continue
    declared = p.get("rust_version")
    if not declared:
        print(f"check-msrv: {p['name']} declares no rust-version; needs at least {reason}", file=sys.stderr)
        failed = True
    elif version(declared) < need:
        print(f"check-msrv: {p['name']} declares rust-version {declared}; needs at least {reason}", file=sys.stderr)
        failed = True
if failed:
    sys.exit(1)
print(f"check-msrv: every workspace crate declares a rust-version of at least {reason}")
EOF
