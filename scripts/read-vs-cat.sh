#!/usr/bin/env bash
# `predictio read` against `cat` and O_DIRECT `dd`, cold and warm.
#
# Usage (root: cold runs drop the page cache):
#   scripts/read-vs-cat.sh [FILE] [ROUNDS]
#
# FILE (default /var/tmp/predictio-read/big.bin) must be on a real disk, not
# tmpfs; it is created with 2 GiB of random bytes when missing. Each round
# runs every case once, interleaved, inside `flock /tmp/bench.lock` (other
# benchmarks on the machine take the same lock); cold cases start after
# `sync; echo 3 > /proc/sys/vm/drop_caches`, warm ones after a `cat` of the
# whole file (so the cache holds the folios a sequential read leaves). Times
# are wall-clock times of the whole process. Prints the median of ROUNDS
# (default 5) per case and its ratio to the case's baseline: `cat` warm,
# O_DIRECT `dd` cold.
#
# PREDICTIO names the binary (default target/release/predictio).
set -euo pipefail

file=${1:-/var/tmp/predictio-read/big.bin}
rounds=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
predictio=${PREDICTIO:-$here/target/release/predictio}
[[ $(id -u) == 0 ]] || { echo "read-vs-cat: needs root (drop_caches)" >&2; exit 1; }
[[ -x $predictio ]] || { echo "read-vs-cat: no $predictio (cargo build --release -p predictio-cli)" >&2; exit 1; }
if [[ ! -f $file ]]; then
    mkdir -p "$(dirname "$file")"
    head -c 2G /dev/urandom >"$file"
    sync
fi
if [[ $(stat -f -c %T "$file") == tmpfs ]]; then
    echo "read-vs-cat: $file is on tmpfs; cold runs would be warm" >&2
    exit 1
fi
bytes=$(stat -c %s "$file")
results=$(mktemp)
trap 'rm -f "$results"' EXIT

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
warm() { cat "$file" >/dev/null; }
# time_case NAME CMD...: runs CMD with its output to /dev/null, records seconds.
time_case() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    echo "$name $(((t1 - t0) / 1000))" >>"$results"
}
cat_file() { cat "$file"; }
dd_direct() { dd if="$file" of=/dev/null bs=16M iflag=direct; }
read_stream() { "$predictio" read "$file"; }
read_parallel() { "$predictio" read --parallel "$file"; }
read_to_pipe() { "$predictio" read "$file" -o - | cat >/dev/null; }
cat_to_pipe() { cat "$file" | cat >/dev/null; }

round() {
    cold; time_case "cold predictio-read" read_stream
    cold; time_case "cold cat" cat_file
    cold; time_case "cold dd-O_DIRECT-16M" dd_direct
    cold; time_case "cold predictio-read--parallel" read_parallel
    warm; time_case "warm predictio-read" read_stream
    warm; time_case "warm cat" cat_file
    warm; time_case "warm predictio-read--parallel" read_parallel
    warm; time_case "warm predictio-read-o-pipe" read_to_pipe
    warm; time_case "warm cat-pipe" cat_to_pipe
}
export -f round time_case cold warm cat_file dd_direct read_stream read_parallel read_to_pipe cat_to_pipe
export file predictio results
for ((i = 1; i <= rounds; i++)); do
    flock /tmp/bench.lock bash -c round
done

# Medians (microseconds), and each case against its baseline.
median() { awk -v k="$1" '$1 " " $2 == k { print $3 }' "$results" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
range() { awk -v k="$1" '$1 " " $2 == k { print $3 }' "$results" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f-%.3f", lo / 1e6, hi / 1e6 }'; }
printf '%-32s %9s %7s %13s %8s\n' "case ($rounds rounds)" "median s" "MB/s" "range s" "vs base"
for k in "cold predictio-read" "cold predictio-read--parallel" "cold cat" "cold dd-O_DIRECT-16M" \
    "warm predictio-read" "warm predictio-read--parallel" "warm cat" "warm predictio-read-o-pipe" "warm cat-pipe"; do
    case $k in
        cold*) base="cold dd-O_DIRECT-16M" ;;
        *pipe) base="warm cat-pipe" ;;
        *) base="warm cat" ;;
    esac
    m=$(median "$k")
    b=$(median "$base")
    awk -v k="$k" -v m="$m" -v b="$b" -v bytes="$bytes" -v r="$(range "$k")" \
        'BEGIN { printf "%-32s %9.3f %7.0f %13s %7.2fx\n", k, m / 1e6, bytes / m, r, b / m }'
done
