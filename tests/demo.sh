#!/bin/sh
# make demo: lowbit on the embedded default model (models/stories260K.bin).
set -e
lowbit=${1:-build/lowbit}
model=models/stories260K.bin
run() {
    echo "\$ lowbit $*"
    "$lowbit" "$@"
    echo
}
echo "== The embedded model: what it holds"
echo
echo "\$ lowbit inspect $model | head -12"
"$lowbit" inspect "$model" | head -12
echo
echo "== The main job: a checkpoint vLLM serves (compressed-tensors, W8A8-INT8), and what it cost"
echo
out=$(mktemp -d)/stories260K-W8A8-INT8
trap 'rm -rf "$(dirname "$out")"' EXIT
run quantize "$model" -o "$out" --scheme W8A8-INT8 --quiet
echo "\$ ls $out"
ls "$out"
echo
run ppl "$model" --text models/tinystories-valid-excerpt.txt --ctx 256 --quiet
# the scheme evaluated in memory: int8 weights and per-token int8 activations
run ppl "$model" --scheme W8A8-INT8 --text models/tinystories-valid-excerpt.txt --ctx 256 --quiet
# the written checkpoint as an engine runs it (its weights, its activation quantization, its own
# tokenizer): the same up to float rounding of the rotary layout (llama2.c's adjacent pairs become
# Hugging Face's half-split rows in the checkpoint)
run ppl "$out" --text models/tinystories-valid-excerpt.txt --ctx 256 --quiet
echo "== The model under each spec, measured on text it was not trained on"
echo
run compare "$model" --text models/tinystories-valid-excerpt.txt --ctx 256 \
    --spec bf16,int8:channel,fp8_e4m3:channel,int4:g32,int4:g128:affine,mxfp8_e4m3,mxfp4,nvfp4
echo "== And it still writes: greedy decoding under int4:g128:affine"
echo
echo "\$ lowbit generate $model -p \"Once upon a time\" -n 48 --spec int4:g128:affine"
"$lowbit" generate "$model" -p "Once upon a time" -n 48 --spec int4:g128:affine
echo
echo "== What each spec costs on one matrix: wq of all 5 layers of stories260K (320 x 64)"
echo
run quant --raw --skip 132380 --count 20480 --shape 320x64 \
    --spec int8:channel,int8:g32,int4:g32,int4:g32:affine,int4:g32:clip=mse,fp8_e4m3:channel,mxfp8_e4m3,mxfp6_e2m3,mxfp4,nvfp4 \
    "$model"
echo "== The outlier lesson: 64 small values and one huge one"
echo
values="0.12 -0.31 0.05 0.44 -0.27 0.19 -0.08 0.36 -0.41 0.02 0.28 -0.15 0.33 -0.22 0.09 -0.47"
values="$values $values $values $values 100"
echo "\$ echo \"$values\" | lowbit quant --spec int8:tensor,int8:g16,int8:g4"
echo "$values" | "$lowbit" quant --spec int8:tensor,int8:g16,int8:g4
echo
echo "== The number formats"
echo
run formats
run cast --to fp8_e4m3 237.4 464 464.0001 1e-9 -0
run cast --to fp4_e2m1 0.25 0.75 2.5 3.5 5 7
run grid fp4_e2m1
