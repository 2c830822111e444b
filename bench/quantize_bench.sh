#!/bin/sh
# make bench-quantize: `lowbit quantize` per scheme on SmolLM2 and on a synthetic >= 4 GiB bf16 checkpoint,
# against llm-compressor's oneshot (same scheme, same model, this CPU) and a plain read+write copy of the
# same bytes, all in one run. Prints the BENCHMARKS.md tables (bench/quantize_table.py).
#
# usage: bench/quantize_bench.sh [BUILD_DIR]
# environment:
#   LOWBIT_BENCH_DIR     scratch directory (default ~/.cache/lowbit/bench): inputs, outputs, logs; not the repo
#   LOWBIT_BENCH_CHUNKS  windows of 512 of wiki.test.raw for PPL/KLD (default 40)
#   LOWBIT_BENCH_PARTS   which parts to run (default "smol llmc eval scheme synth")
#   LOWBIT_BENCH_SYNTH_SCHEMES  schemes quantized on the synthetic checkpoint (default: the RTN ones)
#   LOWBIT_BENCH_REUSE=1 keep outputs and measurements already in the scratch directory (resume a run)
#   LOWBIT_BENCH_HFPPL   whose checkpoints transformers also measures (default "lb llmc"; "lb" halves the eval time)
# Needs: /usr/bin/time (Debian package `time`), the interop environment (make test-interop's) for
# transformers, and creates the llm-compressor one (bench/llmc_env.sh, several GB, cached).
set -e
build=${1:-build}
lowbit=$(cd "$build" && pwd)/lowbit
top=$(pwd)
B=${LOWBIT_BENCH_DIR:-$HOME/.cache/lowbit/bench}
N=${LOWBIT_BENCH_CHUNKS:-40}
PARTS=${LOWBIT_BENCH_PARTS:-smol llmc eval scheme synth}
GGUF=$top/.cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
TEST=$top/data/wikitext-2-raw/wiki.test.raw
CALIB=${LOWBIT_BENCH_CALIB:-/work/shared/data/wikitext-2-raw/wiki.train.excerpt.raw}
[ -f "$CALIB" ] || CALIB=$top/data/wikitext-2-raw/wiki.train.excerpt.raw
IPY=${LOWBIT_INTEROP_PYTHON:-$(ls -d "$HOME"/.cache/lowbit/interop-*/bin/python | head -1)}
R=$B/res
O=$B/out
mkdir -p "$R" "$O"
[ -x /usr/bin/time ] || { echo "quantize_bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
fresh() { [ "${LOWBIT_BENCH_REUSE:-0}" != 1 ] || [ ! -s "$1" ]; }
# lowbit scheme | llm-compressor preset | its group | calibration
SCHEMES="W4A16:g32|W4A16|32|no W4A16-ASYM:g32|W4A16_ASYM|32|no W8A8-FP8|FP8_DYNAMIC|0|no W8A8-INT8|W8A8|0|no
NVFP4A16|NVFP4A16|0|no NVFP4|NVFP4|0|yes MXFP4A16|MXFP4A16|0|no MXFP4|MXFP4|0|no"
RTN=${LOWBIT_BENCH_SYNTH_SCHEMES:-W4A16:g32 W8A8-FP8 W8A8-INT8 NVFP4A16 MXFP4A16}
tag() { echo "$1" | tr ':' '_'; }
log() { echo "quantize_bench: $*" >&2; }

# The model: SmolLM2-135M as a bf16 Hugging Face directory written by lowbit from the GGUF, with a tokenizer
# (lowbit's own when convert writes one, else transformers' GGUF conversion).
SMOL=$B/smollm2-bf16
if [ ! -f "$SMOL/config.json" ]; then
    log "converting $GGUF to $SMOL (bf16)"
    "$lowbit" convert "$GGUF" "$SMOL" --dtype bf16 --quiet
fi
[ -f "$SMOL/tokenizer.json" ] || "$IPY" bench/hf_tokenizer_from_gguf.py "$GGUF" "$SMOL" >&2

if has smol; then
    for row in $SCHEMES; do
        s=${row%%|*}; t=$(tag "$s"); c=${row##*|}
        fresh "$R/lb-$t.time" || continue
        extra=; [ "$c" = yes ] && extra="--calib $CALIB"
        log "lowbit quantize --scheme $s"
        rm -rf "$O/lb-$t"
        /usr/bin/time -v -o "$R/lb-$t.time" "$lowbit" quantize "$SMOL" -o "$O/lb-$t" --scheme "$s" $extra --json \
            > "$R/lb-$t.json" 2> "$R/lb-$t.err" || log "lowbit quantize $s failed (see $R/lb-$t.err)"
    done
fi
if has llmc; then
    LPY=$(sh bench/llmc_env.sh)
    for row in $SCHEMES; do
        s=${row%%|*}; t=$(tag "$s"); rest=${row#*|}; p=${rest%%|*}; rest=${rest#*|}; g=${rest%%|*}; c=${row##*|}
        fresh "$R/llmc-$t.time" || continue
        extra=; [ "$c" = yes ] && extra="--calib $CALIB --samples 8 --seqlen 512"  # 4096 tokens, as lowbit
        [ "$g" = 0 ] || extra="$extra --group $g"
        log "llm-compressor oneshot $p ($extra)"
        rm -rf "$O/llmc-$t"
        /usr/bin/time -v -o "$R/llmc-$t.time" "$LPY" bench/llmc_oneshot.py "$SMOL" "$O/llmc-$t" "$p" $extra \
            > "$R/llmc-$t.out" 2>&1 || log "oneshot $p failed (see $R/llmc-$t.out)"
    done
fi
if has eval; then
    # Reference: the dequantized GGUF. Its distributions are computed once (--save-base) against the bf16 dir.
    if fresh "$R/bf16.kld.json"; then
        log "lowbit kld: GGUF vs bf16 directory ($N windows), saving the base distributions"
        "$lowbit" kld "$GGUF" "$SMOL" --text "$TEST" --chunks "$N" --save-base "$B/base.kldb" --force --json --quiet \
            > "$R/bf16.kld.json"
    fi
    fresh "$R/gguf.ppl.json" || true
    fresh "$R/bf16.hfppl.json" && "$IPY" bench/hf_ppl.py "$SMOL" "$TEST" --chunks "$N" --json > "$R/bf16.hfppl.json" 2> "$R/bf16.hfppl.err"
    for row in $SCHEMES; do
        s=${row%%|*}; t=$(tag "$s")
        for who in lb llmc; do
            d=$O/$who-$t
            [ -f "$d/config.json" ] || continue
            if fresh "$R/$who-$t.kld.json"; then
                log "lowbit kld on $d ($N windows)"
                "$lowbit" kld "$GGUF" "$d" --text "$TEST" --chunks "$N" --base "$B/base.kldb" --json --quiet \
                    > "$R/$who-$t.kld.json" 2> "$R/$who-$t.kld.err" || log "kld on $d failed (see $R/$who-$t.kld.err)"
            fi
            case " ${LOWBIT_BENCH_HFPPL:-lb llmc} " in *" $who "*) ;; *) continue ;; esac
            if fresh "$R/$who-$t.hfppl.json"; then
                log "transformers PPL on $d ($N windows)"
                "$IPY" bench/hf_ppl.py "$d" "$TEST" --chunks "$N" --json > "$R/$who-$t.hfppl.json" \
                    2> "$R/$who-$t.hfppl.err" || log "hf_ppl on $d failed (see $R/$who-$t.hfppl.err)"
            fi
        done
    done
fi
if has scheme; then
    # The same schemes evaluated in memory (`lowbit kld --scheme`, weights only as a checkpoint read is), without
    # writing: a check that what quantize writes is what lowbit evaluates, and the numbers when quantize is absent.
    for row in $SCHEMES; do
        s=${row%%|*}; t=$(tag "$s"); c=${row##*|}
        fresh "$R/lbs-$t.kld.json" || continue
        case $s in
            W8A8-FP8) q="--rule model.layers.*=fp8_e4m3:channel" ;;
            W8A8-INT8) q="--rule model.layers.*=int8:channel:scale=bf16" ;;
            NVFP4|MXFP4) continue ;;  # their activations are part of the scheme: no weight-only twin here
            *) q="--scheme $s" ;;
        esac
        log "lowbit kld --scheme $s in memory ($N windows)"
        "$lowbit" kld "$GGUF" "$SMOL" --text "$TEST" --chunks "$N" --base "$B/base.kldb" --json --quiet $q \
            > "$R/lbs-$t.kld.json" 2> "$R/lbs-$t.kld.err" || log "kld --scheme $s failed (see $R/lbs-$t.kld.err)"
    done
fi
if has synth; then
    S=$B/synth-4g
    if [ ! -f "$S/config.json" ]; then
        log "writing the synthetic checkpoint $S"
        "$IPY" bench/synth_llama.py "$S" >&2
    fi
    # Warm the page cache the same way for every contender: read the input once, then report residency.
    cat "$S"/*.safetensors > /dev/null
    fincore --bytes --noheadings "$S"/*.safetensors > "$R/synth-cached.txt" 2>/dev/null || true
    du -b "$S"/*.safetensors | awk '{s += $1} END {printf "%.0f\n", s}' > "$R/synth-bytes.txt"  # %.0f: mawk's %d stops at 2^31-1
    # Baseline: read + write the same bytes (cat: read(2)/write(2) through user space, no reflink or
    # copy_file_range shortcut), then sync so the writes are paid for as quantize's are below.
    rm -rf "$B/synth-copy"; mkdir "$B/synth-copy"
    /usr/bin/time -v -o "$R/synth-copy.time" sh -c 'for f in "$1"/*; do cat "$f" > "$2/${f##*/}"; done; sync' \
        sh "$S" "$B/synth-copy"
    rm -rf "$B/synth-copy"
    for s in $RTN; do
        t=$(tag "$s")
        log "lowbit quantize --scheme $s on $S"
        rm -rf "$O/synth-lb-$t"
        /usr/bin/time -v -o "$R/synth-lb-$t.time" sh -c '"$1" quantize "$2" -o "$3" --scheme "$4" --json > "$5"; rc=$?; sync; exit $rc' \
            sh "$lowbit" "$S" "$O/synth-lb-$t" "$s" "$R/synth-lb-$t.json" 2> "$R/synth-lb-$t.err" \
            || log "quantize $s on the synthetic checkpoint failed (see $R/synth-lb-$t.err)"
        du -sb "$O/synth-lb-$t" 2>/dev/null | cut -f1 > "$R/synth-lb-$t.size" || true
        rm -rf "$O/synth-lb-$t"
    done
fi
"$IPY" bench/quantize_table.py "$B" "$N"
