#!/usr/bin/env bash
# `predictio read` against `cat` and O_DIRECT `dd`, cold and warm.
#
# Usage (root: cold runs drop the page cache):
#   scripts/read-vs-cat.sh [FILE] [ROUNDS]
#
# FILE (default /var/tmp/predictio-read/big.bin) must be on a real disk, not
# tmpfs; it is created with 2 GiB of random bytes when missing. Each round
# runs every case, interleaved, inside `flock /tmp/bench.lock` (other
# benchmarks on the machine take the same lock); cold cases start after
# `sync; echo 3 > /proc/sys/vm/drop_caches`, warm ones (three runs of each
# per round) after a `cat` of the whole file (so the cache holds the folios
# a sequential read leaves). Times are wall-clock times of the whole
# process. Prints the median of each case's runs (ROUNDS, default 5, per
# cold case) and its throughput against its baseline's (above 1
# is faster): `cat` warm, the faster of the two O_DIRECT runs cold (`dd
# bs=16M iflag=direct`, `predictio read --direct`: 1 MiB reads, 16 in
# flight).
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
# time_case NAME CMD...: runs CMD, output to /dev/null; records microseconds.
time_case() {
    local name=$1
    shift
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || { echo "read-vs-cat: $name failed: $*" >&2; exit 1; }
    t1=$(date +%s%N)
    echo "$name $(((t1 - t0) / 1000))" >>"$results"
}
cat_file() { cat "$file"; }
dd_direct() { dd if="$file" of=/dev/null bs=16M iflag=direct; }
read_default() { "$predictio" read "$file"; }
read_direct() { "$predictio" read --direct "$file"; }
read_parallel() { "$predictio" read --cold parallel "$file"; }
read_readahead() { "$predictio" read --cold readahead "$file"; }
read_to_pipe() { "$predictio" read "$file" -o - | cat >/dev/null; }
cat_to_pipe() { cat "$file" | cat >/dev/null; }

# One round: every case once; the order rotates from round to round so
# that no case always follows the same one.
round() {
    local r=$1 k n
    local cold_cases=("cold predictio-read:read_default" "cold cat:cat_file" "cold dd-O_DIRECT-16M:dd_direct"
        "cold predictio-read--cold-parallel:read_parallel" "cold predictio-read--cold-readahead:read_readahead"
        "cold predictio-read--direct:read_direct")
    local warm_cases=("warm predictio-read:read_default" "warm cat:cat_file"
        "warm predictio-read-o-pipe:read_to_pipe" "warm cat-pipe:cat_to_pipe")
    n=${#cold_cases[@]}
    for ((k = 0; k < n; k++)); do
        local c=${cold_cases[$(((k + r) % n))]}
        cold; time_case "${c%%:*}" "${c##*:}"
    done
    # Warm runs are short and noisy: three of each per round.
    n=${#warm_cases[@]}
    warm
    for ((k = 0; k < 3 * n; k++)); do
        local c=${warm_cases[$(((k + r) % n))]}
        time_case "${c%%:*}" "${c##*:}"
    done
}
export -f round time_case cold warm cat_file dd_direct read_direct read_default read_parallel read_readahead read_to_pipe cat_to_pipe
export file predictio results
for ((i = 0; i < rounds; i++)); do
    flock /tmp/bench.lock bash -c "round $i"
done

# Medians (microseconds), and each case against its baseline.
median() { awk -v k="$1" '$1 " " $2 == k { print $3 }' "$results" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
range() { awk -v k="$1" '$1 " " $2 == k { print $3 }' "$results" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f-%.3f", lo / 1e6, hi / 1e6 }'; }
# Cold cases are held against the faster O_DIRECT run: dd with 16 MiB
# requests, or predictio read --direct (1 MiB requests, 16 in flight).
cold_base="cold dd-O_DIRECT-16M"
if (($(median "cold predictio-read--direct") < $(median "$cold_base"))); then
    cold_base="cold predictio-read--direct"
fi
echo "baselines: cold = $cold_base (the faster O_DIRECT run), warm = cat, pipes = cat | cat"
printf '%-36s %9s %7s %13s %8s\n' "case ($rounds rounds)" "median s" "MB/s" "range s" "vs base"
for k in "cold predictio-read" "cold predictio-read--cold-parallel" "cold predictio-read--cold-readahead" \
    "cold cat" "cold dd-O_DIRECT-16M" "cold predictio-read--direct" "warm predictio-read" "warm cat" "warm predictio-read-o-pipe" "warm cat-pipe"; do
    case $k in
        cold*) base=$cold_base ;;
        *pipe) base="warm cat-pipe" ;;
        *) base="warm cat" ;;
    esac
    m=$(median "$k")
    b=$(median "$base")
    awk -v k="$k" -v m="$m" -v b="$b" -v bytes="$bytes" -v r="$(range "$k")" \
        'BEGIN { printf "%-36s %9.3f %7.0f %13s %7.2fx\n", k, m / 1e6, bytes / m, r, b / m }'
done
