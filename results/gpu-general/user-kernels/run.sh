#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7 (the timm wheel carried in .gpuhost/timm):
# export the gpu_user_kernels profile's timm networks (hase.yaml) to /tmp/uk/files at batch 16 and 64, then run
# that profile's analysis and benchmarks (held out: kernels at idle, whole models at every level) with
# results/gpu-grid/run.sh; $OUT/user-kernels.tar.gz holds the tables. Resumes: call again until every step is done.
#   BUDGET_S=480 bash results/gpu-general/user-kernels/run.sh
set -uo pipefail
mkdir -p /tmp/uk/files
if [ ! -e /tmp/uk/files/convnextv2_atto_i224_b1.onnx ]; then  # batch 1 too: the catalog fingerprints a batch-1 twin
  [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site .gpuhost/timm/timm-*.whl
  PYTHONPATH=/tmp/site:$PWD:/tmp/timm-site python3 results/cpu-general/timm_set.py /tmp/uk/files --batch-sizes 1,16,64 \
    --jobs 6 --ep cuda visformer_tiny regnetz_b16 convnextv2_atto > /tmp/uk/export.log 2>&1 || { tail /tmp/uk/export.log; exit 1; }
  ls /tmp/uk/files
fi
HASE_DATA_DIR=/tmp/huk EXPORT_NAME=user-kernels PROFILE=gpu_user_kernels BATCHES="64 16" LEVELS="0.0 1.0 0.5" \
  SKIP_LEARNING=1 BUNDLES=0 ANALYSIS_S=100 BENCHMARK_S=120 bash results/gpu-grid/run.sh "$((${BUDGET_S:-480} - SECONDS))"
