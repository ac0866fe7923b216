#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh: the recurrent probes (profile gpu_design_space_recurrent)
# exported at batch 1/16/64 by the analysis stage and timed whole, as a user runs them (time_files.py, host clock),
# at stress 0 / 1.0 / 0.5: what the composition makes of their standalone LSTM/GRU kernels, checked on the networks.
# Resumes: call again until every level is done. Results: $OUT/recurrent-probe-timings.tar.gz.
#   BUDGET_S=300 bash results/gpu-general/recurrent-base/time_probes.sh
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD HASE_DATA_DIR=/tmp/hrp DAGSTER_HOME=/tmp/dh PYTHONUNBUFFERED=1
mkdir -p /tmp/dh /tmp/hrp-files /tmp/hrp-timings "${OUT:?}"
for b in 1 16 64; do
  [ -e "/tmp/hrp-files/.b$b" ] && continue
  python3 -m hase_dagster.orchestration.cli materialize --profile gpu_design_space_recurrent --stage analysis \
    --batch-size "$b" > "/tmp/hrp-analysis-b$b.log" 2>&1 || { tail -5 "/tmp/hrp-analysis-b$b.log"; exit 1; }
  cp "$HASE_DATA_DIR"/models/*_b"$b".onnx /tmp/hrp-files/ && touch "/tmp/hrp-files/.b$b"
done
ls /tmp/hrp-files/*.onnx | wc -l
timeout --signal=INT "${BUDGET_S:-300}" python3 results/cpu-general/time_files.py /tmp/hrp-files /tmp/hrp-timings \
  --profile gpu --levels "${LEVELS:-0.0,1.0,0.5}"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } >> /tmp/hrp-timings/host.txt
tar -C /tmp -czf "$OUT/recurrent-probe-timings.tar.gz" hrp-timings && tar -tzf "$OUT/recurrent-probe-timings.tar.gz"
