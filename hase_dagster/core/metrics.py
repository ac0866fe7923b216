"""Names of the accelerator metrics Hase records: DCGM field names on a GPU, ``HOST_*`` on a CPU.

The names are shared by telemetry (which reads them), the warehouse (one column each), the config
(which fields to record) and the regressor (load features); the readers live in ``measure.telemetry``.
"""

from __future__ import annotations

GPU_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
)
HOST_FIELDS: tuple[str, ...] = ("HOST_CPU_UTIL", "HOST_LOAD_1M", "HOST_MEM_USED_MB")
ALL_FIELDS: tuple[str, ...] = GPU_FIELDS + HOST_FIELDS
# The one field that says how busy the device is, per device kind (used for steadiness and load buckets).
LOAD_FIELD = {"cuda": "DCGM_FI_DEV_GPU_UTIL", "cpu": "HOST_CPU_UTIL"}
