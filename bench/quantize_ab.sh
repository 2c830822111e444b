#!/bin/sh
# Two builds of `lowbit quantize` timed against each other per scheme, interleaved in one run (so the load of
# a shared machine falls on both): the best wall time of REPS, the CPU time (user + sys) and peak RSS of that
# run. The calibrated schemes run once. Outputs go to a scratch directory and are deleted.
#
# usage: bench/quantize_ab.sh OLD_LOWBIT NEW_LOWBIT MODEL [REPS]
# environment: LOWBIT_BENCH_CALIB (default: the WikiText-2 train excerpt), TMPDIR
set -e
old=$1; new=$2; model=$3; reps=${4:-3}
[ -x "$old" ] && [ -x "$new" ] && [ -e "$model" ] || { echo "usage: $0 OLD_LOWBIT NEW_LOWBIT MODEL [REPS]" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "quantize_ab: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
calib=${LOWBIT_BENCH_CALIB:-/work/shared/data/wikitext-2-raw/wiki.train.excerpt.raw}
[ -f "$calib" ] || calib=$(dirname "$0")/../data/wikitext-2-raw/wiki.train.excerpt.raw
tmp=$(mktemp -d "${TMPDIR:-/tmp}/quantize_ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "| scheme | old: time s | CPU s | peak RSS MiB | new: time s | CPU s | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
for spec in "W4A16:g32" "W4A16-ASYM:g32" "W8A16:g32" "W8A8-INT8" "W8A8-FP8" "NVFP4A16" "MXFP4A16" "MXFP8" \
            "NVFP4|--calib" "W8A8-FP8-STATIC|--calib"; do
    s=${spec%%|*}; extra=; n=$reps
    case $spec in *"|--calib") extra="--calib $calib"; n=1 ;; esac
    row="| $s"
    for who in old new; do eval "best_$who=''"; done
    i=0
    while [ $i -lt $n ]; do
        for who in old new; do
            eval "lb=\$$who"
            rm -rf "$tmp/out"
            /usr/bin/time -f "%e %M %U %S" -o "$tmp/t" "$lb" quantize "$model" -o "$tmp/out" --scheme "$s" $extra \
                --quiet > /dev/null 2> "$tmp/err" || { echo "quantize_ab: $who $s failed: $(tail -1 "$tmp/err")" >&2; continue; }
            read -r e m u sy < "$tmp/t"
            eval "b=\$best_$who"
            if [ -z "$b" ] || [ "$(echo "$e < ${b%% *}" | bc)" = 1 ]; then
                eval "best_$who=\"$e $(echo "$u + $sy" | bc) $((m / 1024))\""
            fi
        done
        i=$((i + 1))
    done
    for who in old new; do eval "set -- \$best_$who"; row="$row | ${1:--} | ${2:--} | ${3:--}"; done
    echo "$row |"
done
