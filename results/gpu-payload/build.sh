#!/usr/bin/env bash
# Build the GPU host's offline payload: onnxruntime-gpu 1.31.1, the Dagster stack (bundle7), simpy
# (bundle8) and the profiling wheels (transformers' and HolisticTraceAnalysis' missing pieces), installed
# here into one folder for CPython 3.12 (the GPU image's), packed as tar.xz and split into PIECES equal
# pieces .gpuhost/plN/payload.part.N. A device call carries at most 64 MiB with the working tree (45 MB
# on 2026-11-23), so one piece of about 20 MB travels per call; the 14 wheel bundles took 14 calls, these 12.
#   bash results/gpu-payload/build.sh            # about 8 min on 2 cores (xz -9)
set -euo pipefail
pieces=${PIECES:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gh=.gpuhost
mkdir -p "$work/site" "$work/whl"
# The ORT wheel travels in 11 parts (bundle1..5, 1b..5b, 6); join them in order.
cat $(find $gh/bundle{1,1b,2,2b,3,3b,4,4b,5,5b,6} -name 'onnxruntime_gpu-*.whl.part.*' | sort) \
  > "$work/whl/onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"
cp $gh/bundle7/*.whl $gh/bundle8/*.whl $gh/profiling/*.whl "$work/whl/"
.venv/bin/python -m pip install -q --no-deps --no-compile --target "$work/site" --python-version 3.12 \
  --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$work"/whl/*.whl
tar -C "$work/site" -cf - . | xz -9 -T2 > "$work/payload.tar.xz"
rm -rf $gh/pl[0-9]*
(cd "$work" && split -n "$pieces" -d -a 2 payload.tar.xz piece.)
for i in $(seq 0 $((pieces - 1))); do
  mkdir -p "$gh/pl$i" && mv "$work/piece.$(printf %02d "$i")" "$gh/pl$i/payload.part.$i"
done
du -sh $gh/pl[0-9]*
