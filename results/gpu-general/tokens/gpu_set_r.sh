#!/usr/bin/env bash
# On the GPU host, after results/gpu-payload/install.sh pl0 .. pl7: export set R (set_r.py, traced on the GPU) and
# time it whole at each stress level (time_files.py; it resumes: call again until every level is done). Results:
# $OUT/setR-timings.tar.gz. Environment: WORK (/tmp/setR), TIME_S (420), SKIP (set_r.py --skip).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
work=${WORK:-/tmp/setR}
mkdir -p "$work/files" "$work/timings"
if [ ! -e "$work/exported" ]; then
  python3 results/gpu-general/tokens/set_r.py "$work/files" --batch-sizes 1,16,64 --ep cuda --skip "${SKIP:-}" \
    && touch "$work/exported" || exit 1
fi
timeout --signal=INT "${TIME_S:-420}" python3 results/cpu-general/time_files.py "$work/files" "$work/timings" \
  --profile gpu --levels 0.0,1.0,0.5
tar -C "$work" -czf "${OUT:-/tmp/out}/setR-timings.tar.gz" timings
ls "$work/timings"
