#!/usr/bin/env bash
# On a GPU host with the payload in /tmp/site: this folder's grid through ../grid_run.sh (profile gpu_dense_conv_probes, files in /tmp/dcgrid):
# kernels at batch 16, 1 and 64 x stress 0 / 1.0 / 0.5; $OUT/dense-conv-rows.tar.gz holds the tables. Resumable.
#   BUDGET_S=500 bash results/gpu-general/dense-conv-rows/run.sh
exec bash results/gpu-general/grid_run.sh results/gpu-general/dense-conv-rows gpu_dense_conv_probes /tmp/dcgrid
