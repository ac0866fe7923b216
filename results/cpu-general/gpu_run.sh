#!/usr/bin/env bash
# One call on the GPU host, after results/gpu-payload/install.sh pl0 .. pl23: export the independent
# generator's networks (both sets, seeds 701-724) at batch 16 and 64 and time them whole on the gpu
# profile at each stress level (time_files.py; it resumes: call again until every level is done).
# Predictions are made elsewhere, device-free, from the same seeds: hase predict --predictor h100.
# Environment: WORK (/tmp/checker-gpu), BATCHES (16,64), BUDGET_S (480), SEEDS (701-724; none: no generator
# network), MODELS (torchvision classifiers exported beside them, space-separated; none by default), OTHER_KINDS
# (other_kinds.py's networks, comma-separated; none by default), TRANSFORMERS (set_r.py's networks, comma-separated, with
# SKIP its NAME_bB files not to make; none by default), TIMM (timm_set.py's models, space-separated, with TIMM_WHEEL the
# timm wheel to install; none by default), HAND_OPS (hand_ops_set.py's seeds; none by default).
#   set D on the H100 (2026-11-24): WORK=/tmp/setD-gpu SEEDS=737-748 BATCHES=1,4,16,64 MODELS="regnet_x_800mf
#   regnet_y_1_6gf efficientnet_b1 shufflenet_v2_x1_5 squeezenet1_0 mnasnet0_75" bash results/cpu-general/gpu_run.sh
#   (exporting those 72 files took 4 min on the host: with BUDGET_S=540 the first call ran past the 600 s limit
#   before writing its tarball; BUDGET_S=300 on a call that exports)
#   set E on the H100 (fixed 2026-11-24 13:20 UTC, predicted blind at 13:22 with the bundle of 13:16; seed 751
#   does not build): WORK=/tmp/setE-gpu SEEDS=749-750,752-761 BATCHES=1,4,16,64 MODELS="vit_b_32 densenet169
#   efficientnet_b2 regnet_x_3_2gf mnasnet1_3 shufflenet_v2_x2_0" BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set F on the H100 (fixed 2026-11-24 16:24 UTC, before the graph factors were fitted; seeds 762-773 all build;
#   none of the six torchvision models is in any profile or earlier set): WORK=/tmp/setF-gpu SEEDS=762-773
#   BATCHES=1,4,16,64 MODELS="inception_v3 efficientnet_v2_s regnet_y_3_2gf convnext_small vgg11_bn resnet101"
#   BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set G on the H100 (fixed 2026-11-24 19:23 UTC, before the composition change it is to judge; none of the six
#   torchvision models is in any profile or earlier set): WORK=/tmp/setG-gpu SEEDS=774-785 BATCHES=1,4,16,64
#   MODELS="wide_resnet50_2 densenet201 efficientnet_b3 mobilenet_v3_large swin_s resnet152" BUDGET_S=300 bash
#   results/cpu-general/gpu_run.sh
#   set H on the H100 (fixed 2026-11-24 20:48 UTC, after every change of the day, to judge the shipped bundle of
#   20:24 UTC blind at the first check's batch sizes; none of the six torchvision models is in any profile or
#   earlier set): WORK=/tmp/setH-gpu SEEDS=786-797 BATCHES=16,64 MODELS="densenet161 resnext101_32x8d
#   regnet_x_8gf efficientnet_b4 vgg13_bn shufflenet_v2_x0_5" BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set I on the H100 (fixed 2026-11-24 22:02 UTC, before this session's changes, to judge them blind; none of the
#   six torchvision models is in any profile or earlier set): WORK=/tmp/setI-gpu SEEDS=800-811 BATCHES=1,4,16,64
#   MODELS="alexnet vgg16 regnet_y_8gf convnext_base swin_v2_t efficientnet_v2_m" BUDGET_S=300 bash
#   results/cpu-general/gpu_run.sh
#   set J on the H100 (fixed 2026-11-25 00:27 UTC, before the movement and highres probes are measured or merged, to
#   judge them blind; none of the six torchvision models is in any profile or earlier set): WORK=/tmp/setJ-gpu
#   SEEDS=812-823 BATCHES=1,4,16,64 MODELS="swin_v2_b vgg19 maxvit_t resnext101_64x4d efficientnet_b5 regnet_y_16gf"
#   BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   (set J's first call, with BUDGET_S=400, ran past the 600 s limit: its export took over 3 min with --jobs)
#   set K on the H100 (fixed 2026-11-25 03:47 UTC, before the windows rows at batch 16 and under load are merged, to
#   judge them blind; none of the six torchvision models is in any profile or earlier set): WORK=/tmp/setK-gpu
#   SEEDS=824-835 BATCHES=1,4,16,64 MODELS="swin_b vit_l_32 convnext_large efficientnet_b6 regnet_x_16gf vgg16_bn"
#   BUDGET_S=250 bash results/cpu-general/gpu_run.sh
#   set O on the H100 (fixed 2026-11-26 23:10 UTC, before the operators probes are measured, to judge them blind;
#   networks of kinds no profile or set has, other_kinds.py): WORK=/tmp/setO-gpu SEEDS=none BATCHES=1,16,64
#   OTHER_KINDS=unet,dcgan,audioenc,tcn,lstmlm,grutagger,mixer,espcn,fpn,style,aspp,r3d18 bash results/cpu-general/gpu_run.sh
#   set L on the H100 (fixed 2026-11-25 07:40 UTC, after set K's verdict and before the wide-group probes, batch 1/4 only
#   to fit the machine's last minutes; timed first, its tarball kept sealed until predictions were committed; none of
#   the six torchvision models is in any profile or earlier set): WORK=/tmp/setL-gpu SEEDS=836-847 BATCHES=1,4
#   MODELS="vit_l_16 efficientnet_v2_l regnet_y_32gf wide_resnet101_2 vgg13 efficientnet_b7" BUDGET_S=330 bash
#   results/cpu-general/gpu_run.sh
#   set M on the H100 (fixed 2026-11-25 10:58-11:06 UTC, before the stride-2 wide-group bundle was chosen, to judge it
#   and the shipped one blind; predicted by both at 11:17 UTC, before any timing; none of the four
#   torchvision models is in any profile or earlier set): WORK=/tmp/setM-gpu SEEDS=848-859 BATCHES=1,4,16,64
#   MODELS="regnet_x_32gf swin_v2_s vgg11 vgg19_bn" BUDGET_S=250 bash results/cpu-general/gpu_run.sh
#   set N on the H100 (fixed 2026-11-25 16:42 UTC, after the highres probes were measured and before any bundle with
#   them was scored, to judge them blind; every torchvision classifier is in a profile or an earlier set, so its four
#   are segmentation networks, none in any profile or set; batch 16/64 only, the first check's, to fit the session's
#   last device minutes): WORK=/tmp/setN-gpu SEEDS=860-871 BATCHES=16,64
#   MODELS="lraspp_mobilenet_v3_large deeplabv3_mobilenet_v3_large fcn_resnet50 deeplabv3_resnet50" BUDGET_S=250
#   bash results/cpu-general/gpu_run.sh
#   set N at batch 1/4 (the same networks, predicted by both bundles at 17:17 UTC, after set N's batch 16/64 verdict,
#   before these were timed): WORK=/tmp/setN14-gpu SEEDS=860-871 BATCHES=1,4 MODELS="lraspp_mobilenet_v3_large
#   deeplabv3_mobilenet_v3_large fcn_resnet50 deeplabv3_resnet50" BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set S on the H100 (fixed 2026-11-27 10:44 UTC, before any prediction or timing; timm models, a library no profile,
#   probe or earlier set drew from): WORK=/tmp/setS-gpu SEEDS=none BATCHES=1,4,16,64 TIMM="$(cat results/cpu-general/setS-models.txt)"
#   TIMM_WHEEL=.gpuhost/timm/timm-1.0.31-py3-none-any.whl BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set AG on an H200 (seeds fixed 2026-11-28 16:42 UTC, predicted blind at 16:44): WORK=/tmp/setAG-gpu SEEDS=none
#   HAND_OPS=901-912 BATCHES=1,16,64 bash results/cpu-general/gpu_run.sh
#   set AH on an H200 (seeds 913-924 drawn 17:3x UTC after set AG's verdict, predicted blind by the bundles with the
#   extended rules and proxies before timing): WORK=/tmp/setAH-gpu SEEDS=none HAND_OPS=913-924 BATCHES=1,16,64
#   bash results/cpu-general/gpu_run.sh
#   set AL on an H200 (drawn 2026-11-29 07:45 UTC, sample_timm_set.py --seed 20261206 --count 9 --max-size 288
#   --max-params 60, hand_ops seeds 957-960, generator seeds 961-964; batch 1/4/16/128, the first blind batch 4 and
#   128 on this device): WORK=/tmp/setAL-gpu SEEDS=961-964 HAND_OPS=957-960 BATCHES=1,4,16,128
#   TIMM="$(cat results/cpu-general/setAL-models.txt)" TIMM_WHEEL=.gpuhost/timm/timm-1.0.31-py3-none-any.whl
#   BUDGET_S=300 bash results/cpu-general/gpu_run.sh
#   set AM on an H200 (drawn 2026-11-29 10:5x UTC, sample_timm_set.py --seed 20261207 --count 7 --max-size 336
#   --max-params 120, five kept; hand_ops seeds 965-968, generator seeds 969-972; timings carry host_loop_ms): WORK=/tmp/setAM-gpu
#   SEEDS=969-972 HAND_OPS=965-968 BATCHES=1,4,16,128 TIMM="$(cat results/cpu-general/setAM-models.txt)"
#   TIMM_WHEEL=.gpuhost/timm/timm-1.0.31-py3-none-any.whl BUDGET_S=570 bash results/cpu-general/gpu_run.sh
#   (the five timm models' export took 452 s on the host: a first call exports, a second times)
#   set AN on an H200 (drawn 2026-11-29 13:3x UTC, before this session's changes: hand_ops seeds 973-976, generator
#   seeds 977-980; timed with the readings around the window, tarball sealed until predictions are committed):
#   WORK=/tmp/setAN-gpu SEEDS=977-980 HAND_OPS=973-976 BATCHES=1,4,16,128 BUDGET_S=480 bash results/cpu-general/gpu_run.sh
#   set AR on an H200 (drawn 2026-12-07 17:55 UTC for the H100, predicted by h100 and h200 before any timing; the
#   device time left allowed batch 1/16/128 with stress 0.5 cut short): WORK=/tmp/setAR-gpu SEEDS=4012-4017
#   HAND_OPS=1029-1034 BATCHES=1,16,128 BUDGET_S=255 bash results/cpu-general/gpu_run.sh
#   BUDGET_S=480 bash results/cpu-general/gpu_run.sh [LEVELS=0.0,1.0,0.5]   # a level cut short is timed again
set -uo pipefail
export PYTHONPATH=$PWD:/tmp/site
work=${WORK:-/tmp/checker-gpu}
mkdir -p "$work" "${OUT:?}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; date -u; } >> "$work/host.txt" 2>&1
if [ ! -e "$work/files/traits.json" ]; then
  # one process a model and 8 seeds at once (the host has 16 cores; the files are the same as one at a time)
  [ -z "${MODELS:-}" ] || python3 results/cpu-general/export_torchvision.py "$work/files" --batch-sizes "${BATCHES:-16,64}" \
    --jobs 6 $MODELS 2> "$work/export.log"
  [ -z "${OTHER_KINDS:-}" ] || python3 results/cpu-general/other_kinds.py "$work/files" --batch-sizes "${BATCHES:-16,64}" \
    --only "$OTHER_KINDS" >> "$work/export.log" 2>&1
  [ -z "${TRANSFORMERS:-}" ] || python3 results/gpu-general/tokens/set_r.py "$work/files" --batch-sizes "${BATCHES:-16,64}" \
    --only "$TRANSFORMERS" --skip "${SKIP:-}" --ep cuda >> "$work/export.log" 2>&1
  if [ -n "${TIMM:-}" ]; then  # timm_set.py's models; timm itself from the wheel carried beside the payload
    [ -d /tmp/timm-site ] || python3 -m pip install -q --no-deps --target /tmp/timm-site "${TIMM_WHEEL:?a timm wheel}" >> "$work/export.log" 2>&1
    PYTHONPATH=$PYTHONPATH:/tmp/timm-site python3 results/cpu-general/timm_set.py "$work/files" \
      --batch-sizes "${BATCHES:-16,64}" --jobs 8 --ep cuda $TIMM >> "$work/export.log" 2>&1
    cp "$work/files/timm.json" "$work/files/timm-failed.json" "$work/" 2>/dev/null
    python3 results/cpu-general/onnx_ops.py "$work/files" > "$work/ops.json" 2>> "$work/export.log"
  fi
  [ -z "${HAND_OPS:-}" ] || python3 results/cpu-general/hand_ops_set.py "$work/files" --seeds "$HAND_OPS" \
    --batch-sizes "${BATCHES:-16,64}" >> "$work/export.log" 2>&1
  if [ "${SEEDS:-701-724}" = none ]; then
    echo '[]' > "$work/files/traits.json"  # no generator network: the folder is whole
  else
    python3 results/cpu-general/checker_nets.py "$work/files" --seeds "${SEEDS:-701-724}" \
      --batch-sizes "${BATCHES:-16,64}" --jobs 8 2>> "$work/export.log"
  fi
fi
timeout --signal=INT "${BUDGET_S:-480}" python3 results/cpu-general/time_files.py "$work/files" "$work/timings" \
  --profile gpu --levels "${1:-0.0,1.0,0.5}"
date -u >> "$work/host.txt"
tar -C "$work" --exclude=files -czf "$OUT/$(basename "$work").tar.gz" . && tar -tzf "$OUT/$(basename "$work").tar.gz"
