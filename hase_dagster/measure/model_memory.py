"""The memory a model holds while ORT runs it, measured around its session (built, warmed up and
timed): on the CUDA EP the process's GPU memory by NVML and the device's free memory by CUDA
(``cudaMemGetInfo`` through torch), on the CPU EP the process's resident set (RSS). ORT's arenas
keep what they grew to, so the reading after the timed runs is the peak the session reached.

The session's allocator settings are recorded beside the figures: the arena's rounding is part of
what a prediction from tensor sizes alone cannot see.
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass
from typing import Any

MB = 1e6
# ORT's CUDA EP options that decide how much its arena reserves.
ARENA_OPTIONS = ("arena_extend_strategy", "gpu_mem_limit", "cudnn_conv_use_max_workspace", "use_tf32")


@dataclass(frozen=True)
class MemoryReading:
    """One moment's memory: process RSS, the process's GPU memory (NVML) and the device's free
    memory (CUDA), in bytes; None where this machine cannot say."""

    rss: int
    process_gpu: int | None = None
    device_free: int | None = None


class MemoryMeter:
    """Reads memory before and after a session for one execution provider."""

    def __init__(self, ep: str) -> None:
        self.ep = ep
        self._nvml: Any = None
        self._handle: Any = None
        self._torch: Any = None
        if ep == "cuda":
            self._start_cuda()

    def _start_cuda(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML here: the CUDA reading alone
            self._nvml = None
        try:
            import torch

            if torch.cuda.is_available():
                self._torch = torch
        except ImportError:
            self._torch = None

    def _process_gpu(self) -> int | None:
        if self._nvml is None:
            return None
        try:
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:  # NVML refuses (e.g. no permission): no per-process figure
            return None
        used = [p.usedGpuMemory for p in processes if p.pid == os.getpid() and p.usedGpuMemory is not None]
        # In a container NVML reports host pids: ours is then not in the list.
        return int(sum(used)) if used else None

    def read(self) -> MemoryReading:
        """The memory now (after a garbage collection, so dead sessions are gone)."""
        import psutil

        gc.collect()
        _trim_heap()
        free = int(self._torch.cuda.mem_get_info()[0]) if self._torch is not None else None
        return MemoryReading(psutil.Process().memory_info().rss, self._process_gpu(), free)

    def columns(self, before: MemoryReading, after: MemoryReading, session: Any) -> dict[str, Any]:
        """The benchmark row's memory columns: what the session holds (``peak_memory_mb``, by the
        best source this EP has), every source's figure, and the allocator settings."""
        rss = (after.rss - before.rss) / MB
        nvml = (
            (after.process_gpu - before.process_gpu) / MB
            if after.process_gpu is not None and before.process_gpu is not None
            else None
        )
        free = (
            (before.device_free - after.device_free) / MB
            if after.device_free is not None and before.device_free is not None
            else None
        )
        if self.ep == "cuda":
            peak, source = (nvml, "nvml_process") if nvml is not None else (free, "cuda_mem_get_info")
        else:
            peak, source = rss, "rss"
        return {
            "peak_memory_mb": peak if peak is not None else None,
            "memory_source": source if peak is not None else None,
            "rss_delta_mb": rss,
            "gpu_process_delta_mb": nvml,
            "device_free_delta_mb": free,
            "memory_arena": json.dumps(arena_settings(session), sort_keys=True),
        }


def _trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc's ``malloc_trim``), so that RSS counts what is
    held now, not what earlier sessions of this process freed and the allocator kept."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS then also counts freed, kept memory
        pass


def arena_settings(session: Any) -> dict[str, Any]:
    """The session's allocator settings: the CPU arena and memory patterns, and the CUDA EP's arena
    options where it runs."""
    options = session.get_session_options()
    settings: dict[str, Any] = {
        "enable_cpu_mem_arena": bool(options.enable_cpu_mem_arena),
        "enable_mem_pattern": bool(options.enable_mem_pattern),
    }
    cuda = session.get_provider_options().get("CUDAExecutionProvider")
    if cuda:
        settings.update({key: cuda.get(key) for key in ARENA_OPTIONS if key in cuda})
    return settings
