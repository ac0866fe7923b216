#!/usr/bin/env bash
# Build the GPU host's offline payload: onnxruntime-gpu 1.31.1, the Dagster stack, simpy
# and the profiling wheels (transformers' and HolisticTraceAnalysis' missing pieces), installed
# here into one folder for CPython 3.12 (the GPU image's), packed as tar.xz and split into PIECES equal
# pieces .gpuhost/plN/payload.part.N, each with a `pieces` file holding the count (install.sh waits for that
# many). A device call carries at most 64 MiB with the working tree (49.6 MB on 2026-11-23, 21:15 UTC; 52.2 MB on
# 2026-11-24; 56.4 MB at 11:20 UTC that day, 0.6 MB short of the limit with a 10.0 MB piece; 58.3 MB at 13:25 UTC,
# so 30 pieces of 7.7 MB since; at 23:00 UTC a 7.7 MB piece no longer passed beside the 58.5 MB tree, so 60
# pieces of 3.9 MB since), so one piece travels per call (60 calls, about 5 minutes).
#   bash results/gpu-payload/build.sh            # about 9 min on 2 cores (downloads, then xz -9)
#   PIECES=60 bash results/gpu-payload/build.sh --resplit   # the pieces there are, joined and split again
set -euo pipefail
pieces=${PIECES:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gh=.gpuhost
mkdir -p "$work/site" "$gh"

split_payload() {  # payload.tar.xz in $work -> $pieces pieces .gpuhost/plN
  rm -rf $gh/pl[0-9]*
  (cd "$work" && split -n "$pieces" -d -a 3 payload.tar.xz piece.)
  for i in $(seq 0 $((pieces - 1))); do
    mkdir -p "$gh/pl$i" && mv "$work/piece.$(printf %03d "$i")" "$gh/pl$i/payload.part.$i"
    echo "$pieces" > "$gh/pl$i/pieces"  # install.sh reads how many to wait for from any piece it has
  done
  du -sh $gh/pl0
}

if [ "${1:-}" = --resplit ]; then
  have=$(cat $gh/pl0/pieces)
  for i in $(seq 0 $((have - 1))); do cat "$gh/pl$i/payload.part.$i"; done > "$work/payload.tar.xz"
  xz -t "$work/payload.tar.xz"  # whole before the old pieces go
  split_payload
  exit 0
fi
# The wheels: onnxruntime-gpu and the Dagster stack (the shared GPU-host list), transformers' and
# HolisticTraceAnalysis' missing pieces (results/profiling), simpy; all downloaded into one folder.
cat ../shared/tools/gpuhost-requirements.txt results/profiling/gpuhost-requirements.txt > "$work/reqs.txt"
grep -i '^simpy==' constraints.txt >> "$work/reqs.txt"
BUNDLE_BYTES=2000000000 ../shared/tools/offline-wheelhouse "$work/reqs.txt" "$work/wh" ../shared/tools/gpuhost-has.txt
mv "$work/wh/bundle1" "$work/whl"
python3 -m pip install -q --no-deps --no-compile --target "$work/site" --python-version 3.12 \
  --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$work"/whl/*.whl
tar -C "$work/site" -cf - . | xz -9 -T2 > "$work/payload.tar.xz"
split_payload
