"""What a device can do: peak GEMM throughput per precision, memory bandwidth, launch and runtime
overheads, and (on a GPU) how it slices time between processes.

:func:`profile_device` measures and returns one JSON-able document; :func:`save_profile` writes it
with a markdown report and plots (:mod:`hase_dagster.measure.device_report`); :func:`load_roofline`
reads the peaks back for the regressor's roofline features (FLOPs over peak, bytes over bandwidth).

The CPU part (``device="cpu"``) takes a few seconds: torch and numpy GEMMs on 1 thread and on every
thread, host copy/scale/triad bandwidth, and ORT's per-run overhead on the CPU EP. The GPU part
(:mod:`hase_dagster.measure.gpu_profile`) needs CUDA and torch's ``triton``.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hase_dagster.core.errors import HaseError

SCHEMA_VERSION = 1
PROFILE_FILE = "device_profile.json"
DEVICES = ("cpu", "cuda")

# The GEMM sizes (square: M = N = K = size; skinny: M = SKINNY_M rows, a small batch through a wide
# layer, N = K = size). Quick runs keep a few.
SQUARE_SIZES = (256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_SQUARE_SIZES = (256, 1024, 4096)
SKINNY_M = 256
SKINNY_SIZES = (1024, 4096, 16384)
QUICK_SKINNY_SIZES = (4096,)
CPU_SIZES = (256, 512, 1024)
QUICK_CPU_SIZES = (256, 512)

# Aliases a caller may use for a precision (ONNX/ORT and numpy names) -> the profile's key.
PRECISION_ALIASES = {
    "float": "fp32",
    "float32": "fp32",
    "tensor(float)": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "tensor(float16)": "fp16",
    "bfloat16": "bf16",
    "tensor(bfloat16)": "bf16",
    "int8": "int8",
    "tensor(int8)": "int8",
    "uint8": "int8",
    "tensor(uint8)": "int8",
    "float8_e4m3fn": "fp8",
}


@dataclass(frozen=True)
class GemmShape:
    """One GEMM problem: C (m x n) = A (m x k) @ B (k x n)."""

    kind: str  # "square" or "skinny"
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def size(self) -> int:
        """The size a plot puts on its x axis: N (= K)."""
        return self.n


def gemm_shapes(quick: bool) -> list[GemmShape]:
    """The GPU GEMM shapes: square sizes, then skinny ones (SKINNY_M rows)."""
    square = QUICK_SQUARE_SIZES if quick else SQUARE_SIZES
    skinny = QUICK_SKINNY_SIZES if quick else SKINNY_SIZES
    return [GemmShape("square", s, s, s) for s in square] + [GemmShape("skinny", SKINNY_M, s, s) for s in skinny]


def time_host(fn: Callable[[], Any], min_seconds: float = 0.05, min_runs: int = 3, max_runs: int = 1000) -> float:
    """Median wall seconds of ``fn()`` over at least ``min_runs`` runs and ``min_seconds``, after one
    untimed run."""
    fn()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - started < min_seconds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _set_threads(threads: int) -> Any:
    """Limit torch and the BLAS libraries numpy uses to ``threads``; return a callable that undoes it."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    limiter: Any = None
    try:
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(limits=threads)
    except ImportError:  # numpy then uses its own default threads; the row says how many torch used
        pass

    def undo() -> None:
        torch.set_num_threads(previous)
        if limiter is not None:
            limiter.restore_original_limits()

    return undo


def cpu_gemm(sizes: Sequence[int], thread_counts: Sequence[int], seconds: float = 0.05) -> list[dict[str, Any]]:
    """fp32 square GEMM GFLOPS of torch and numpy on the host at each thread count."""
    import numpy as np
    import torch

    rows = []
    for threads in thread_counts:
        undo = _set_threads(threads)
        try:
            for size in sizes:
                a = torch.randn(size, size)
                b = torch.randn(size, size)
                an, bn = a.numpy(), b.numpy()
                flops = 2 * size**3
                calls: list[tuple[str, Callable[[], Any]]] = [
                    ("torch", functools.partial(torch.mm, a, b)),
                    ("numpy", functools.partial(np.matmul, an, bn)),
                ]
                for library, fn in calls:
                    s = time_host(fn, min_seconds=seconds)
                    rows.append(
                        {
                            "library": library,
                            "dtype": "fp32",
                            "kind": "square",
                            "m": size,
                            "n": size,
                            "k": size,
                            "threads": threads,
                            "ms": s * 1e3,
                            "tflops": flops / s / 1e12,
                        }
                    )
        finally:
            undo()
    return rows


def cpu_bandwidth(elements: int, seconds: float = 0.1) -> list[dict[str, Any]]:
    """Host memory bandwidth of copy, scale and triad (STREAM's kernels) on fp32 arrays of
    ``elements``, by torch on every thread, and numpy's copy (one thread) beside them.

    Bytes follow STREAM: copy and scale move 2 arrays, triad (a = b + s * c, one fused pass by
    ``torch.add(..., alpha=s)``) 3.
    """
    import numpy as np
    import torch

    a = torch.rand(elements)
    b = torch.rand(elements)
    c = torch.rand(elements)
    array_bytes = elements * 4
    kernels: list[tuple[str, str, int, Callable[[], Any]]] = [
        ("copy", "torch", 2, lambda: b.copy_(a)),
        ("scale", "torch", 2, lambda: torch.mul(a, 3.0, out=b)),
        ("triad", "torch", 3, lambda: torch.add(b, c, alpha=3.0, out=a)),
        ("copy", "numpy", 2, lambda: np.copyto(b.numpy(), a.numpy())),
    ]
    rows = []
    for name, library, arrays, fn in kernels:
        s = time_host(fn, min_seconds=seconds)
        moved = arrays * array_bytes
        rows.append(
            {
                "kernel": name,
                "library": library,
                "bytes": moved,
                "ms": s * 1e3,
                "gbps": moved / s / 1e9,
                "pct_of_peak": None,
            }
        )
    return rows


def _tiny_model(op: str = "Add", width: int = 256) -> bytes:
    """An ONNX model that does almost nothing: ``y = x + x`` (Add) or ``y = x`` (Identity)."""
    import onnx
    from onnx import helper

    node = helper.make_node(op, ["x", "x"] if op == "Add" else ["x"], ["y"])
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, width])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, width])
    model = helper.make_model(helper.make_graph([node], "tiny", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def ort_overhead(ep: str, runs: int = 2000) -> list[dict[str, Any]]:
    """ORT's per-run cost for an Add and an Identity of 256 floats on ``ep``, inputs and outputs
    bound on the device (IO binding), so no host copy is timed: wall µs per ``run_with_iobinding``
    (which waits for the device at its end), median and p90 over ``runs``."""
    import numpy as np
    import onnxruntime as ort

    from hase_dagster.core.ort_runtime import make_session

    device = "cuda" if ep == "cuda" else "cpu"
    rows = []
    for op in ("Add", "Identity"):
        session = make_session(_tiny_model(op), ep)  # type: ignore[arg-type]
        x = ort.OrtValue.ortvalue_from_numpy(np.ones((1, 256), dtype=np.float32), device, 0)
        binding = session.io_binding()
        binding.bind_ortvalue_input("x", x)
        binding.bind_output("y", device)
        for _ in range(50):
            session.run_with_iobinding(binding)
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            session.run_with_iobinding(binding)
            samples.append(time.perf_counter() - t0)
        samples.sort()
        rows.append(
            {
                "what": f"ORT run, {op} of 256 floats, IO binding",
                "ep": ep,
                "median_us": samples[len(samples) // 2] * 1e6,
                "p90_us": samples[int(len(samples) * 0.9)] * 1e6,
                "runs": runs,
            }
        )
    return rows


def profile_cpu(quick: bool = False) -> dict[str, Any]:
    """The CPU part: GEMM on 1 thread and every thread, bandwidth, ORT's per-run overhead."""
    import torch

    threads = torch.get_num_threads()
    counts = sorted({1, threads})
    sizes = QUICK_CPU_SIZES if quick else CPU_SIZES
    elements = (8 if quick else 32) * 2**20
    gemm = cpu_gemm(sizes, counts, seconds=0.02 if quick else 0.05)
    return {
        "gemm": gemm,
        "bandwidth": cpu_bandwidth(elements, seconds=0.05 if quick else 0.1),
        "overheads": {"ort": ort_overhead("cpu", runs=500 if quick else 2000)},
        "threads": counts,
    }


def _environment(device: str) -> dict[str, Any]:
    import torch

    environment: dict[str, Any] = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }
    try:
        import onnxruntime as ort

        environment["onnxruntime"] = ort.__version__
    except ImportError:  # pragma: no cover - a dependency of the project
        pass
    if device == "cuda":
        try:
            import triton

            environment["triton"] = triton.__version__
        except ImportError:
            environment["triton"] = None
    return environment


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else the platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_device(
    device: str, quick: bool = False, steps: Sequence[str] | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure ``device`` and return the profile document (see the module docstring).

    Args:
        device: ``cpu`` or ``cuda``.
        quick: fewer sizes and shorter timings (seconds instead of a minute on a GPU).
        steps: on ``cuda``, only these GPU steps (:data:`hase_dagster.measure.gpu_profile.STEPS`);
            default all.
        log: where progress lines go.

    Raises:
        HaseError: an unknown device, or ``cuda`` where torch sees no CUDA GPU.
    """
    if device not in DEVICES:
        raise HaseError(f"unknown device {device!r}; one of {', '.join(DEVICES)}")
    if device == "cpu" and steps:
        raise HaseError("steps choose among the GPU's measurements; the CPU profile has none to choose (drop --steps)")
    started = time.monotonic()
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "device": device,
        "quick": quick,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": _environment(device),
    }
    if device == "cpu":
        document["device_name"] = cpu_name()
        document.update(profile_cpu(quick))
    else:
        from hase_dagster.measure.gpu_profile import profile_gpu

        document.update(profile_gpu(quick, steps, log))
    document["peaks"] = peaks_of(document)
    document["seconds"] = round(time.monotonic() - started, 1)
    return document


def resolve_device(name: str) -> str:
    """``auto`` is ``cuda`` where torch sees a CUDA GPU, else ``cpu``; other names pass through.

    Raises:
        HaseError: a name other than ``auto``, ``cpu`` and ``cuda``.
    """
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in DEVICES:
        raise HaseError(f"unknown device {name!r}; one of auto, {', '.join(DEVICES)}")
    return name


def summary_lines(document: dict[str, Any]) -> list[str]:
    """A few lines for a terminal: the peaks, and the steps that failed."""
    peaks = document["peaks"]
    tflops = ", ".join(f"{k} {v:.3g}" for k, v in sorted(peaks["tflops"].items())) or "none"
    lines = [f"{document.get('device_name')} ({document['device']}): peak TFLOPS {tflops}"]
    if peaks.get("bandwidth_gbps"):
        hbm = f" of {peaks['hbm_peak_gbps']:.0f} GB/s (NVML peak)" if peaks.get("hbm_peak_gbps") else ""
        lines.append(f"best bandwidth {peaks['bandwidth_gbps']:.1f} GB/s{hbm}")
    lines += [f"step {step} FAILED: {error}" for step, error in (document.get("errors") or {}).items()]
    return lines


def peaks_of(document: dict[str, Any]) -> dict[str, Any]:
    """The best achieved figures of a profile: TFLOPS per precision (the vendor library's GEMMs;
    on the CPU on every thread, and ``fp32@1`` on one), and the best bandwidth in GB/s."""
    tflops: dict[str, float] = {}
    for row in document.get("gemm", []):
        if row.get("tflops") is None or row.get("library") not in ("cublas", "torch"):
            continue
        # On a CPU every thread count counts for the peak (a busy host can make 1 thread the fastest);
        # the one-thread figure is kept apart as ``<dtype>@1``.
        keys = [row["dtype"]]
        if document["device"] == "cpu" and row["threads"] == 1:
            keys.append(f"{row['dtype']}@1")
        for key in keys:
            tflops[key] = max(tflops.get(key, 0.0), float(row["tflops"]))
    bandwidth = [float(r["gbps"]) for r in document.get("bandwidth", []) if r.get("gbps") is not None]
    return {
        "tflops": tflops,
        "bandwidth_gbps": max(bandwidth) if bandwidth else None,
        "hbm_peak_gbps": document.get("memory", {}).get("peak_gbps"),
    }


def merge_profiles(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One profile from several of the same device (e.g. the GPU run's steps, each in its own
    process): row lists are concatenated, sections merged, the first document's settings kept and
    the peaks recomputed.

    Raises:
        HaseError: no documents, or documents of different devices or schemas.
    """
    if not documents:
        raise HaseError("no device profiles to merge")
    devices = {(d.get("device"), d.get("device_name"), d.get("schema_version")) for d in documents}
    if len(devices) != 1:
        raise HaseError(f"cannot merge profiles of different devices or schemas: {sorted(map(str, devices))}")
    merged: dict[str, Any] = json.loads(json.dumps(documents[0], default=str))
    for document in documents[1:]:
        for key, value in document.items():
            if key in ("peaks", "seconds"):
                continue
            if isinstance(value, list) and isinstance(merged.get(key), list):
                merged[key] = merged[key] + [item for item in value if item not in merged[key]]
            elif isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged.setdefault(key, value)
    merged["seconds"] = round(sum(float(d.get("seconds") or 0.0) for d in documents), 1)
    merged["peaks"] = peaks_of(merged)
    return merged


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A saved profile document (``device_profile.json``, or a folder holding one).

    Raises:
        HaseError: no readable profile of this schema there.
    """
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / PROFILE_FILE
    if not candidate.is_file():
        raise HaseError(
            f"no device profile at {candidate}: run `hase device-profile` or materialize the device_profile asset"
        )
    try:
        document = json.loads(candidate.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HaseError(f"cannot read the device profile {candidate}: {exc}") from exc
    if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION:
        found = document.get("schema_version") if isinstance(document, dict) else None
        raise HaseError(f"{candidate} has device-profile schema {found!r}; this Hase reads {SCHEMA_VERSION}")
    return document


def device_profile_dir(data_root: str | os.PathLike[str], device: str) -> Path:
    """Where a data directory keeps ``device``'s profile: ``<root>/device/<device>``."""
    return Path(data_root) / "device" / device


def save_profile(document: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write ``document`` as ``device_profile.json`` with ``report.md`` and its plots into ``out``;
    return the report's path."""
    from hase_dagster.measure.device_report import write_report

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PROFILE_FILE).write_text(json.dumps(document, indent=1, default=str))
    return write_report(document, folder)


@dataclass(frozen=True)
class RooflinePeaks:
    """A device's measured peaks, for roofline bounds: a kernel of F FLOPs in precision p moving B
    bytes takes at least max(F / peak(p), B / bandwidth)."""

    device: str
    device_name: str
    tflops: dict[str, float] = field(default_factory=dict)
    bandwidth_gbps: float = 0.0
    hbm_peak_gbps: float | None = None

    def peak_tflops(self, precision: str = "fp32", single_thread: bool = False) -> float:
        """Peak achieved TFLOPS for ``precision`` (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``int8``,
        ``fp8``, or an ONNX/numpy name such as ``float16``); on a CPU ``single_thread`` gives the
        one-thread figure.

        Raises:
            HaseError: the profile has no figure for that precision.
        """
        key = PRECISION_ALIASES.get(precision.lower(), precision.lower())
        if single_thread:
            key = f"{key}@1"
        if key not in self.tflops:
            raise HaseError(
                f"the {self.device} profile ({self.device_name}) has no GEMM peak for {precision!r}; "
                f"it has {', '.join(sorted(self.tflops)) or 'none'}"
            )
        return self.tflops[key]

    def roofline_ms(
        self, flops: float, bytes_moved: float, precision: str = "fp32", single_thread: bool = False
    ) -> float:
        """The roofline's lower bound on a kernel's time in ms."""
        features = self.features(flops, bytes_moved, precision, single_thread)
        return features["roofline_ms"]

    def features(
        self, flops: float, bytes_moved: float, precision: str = "fp32", single_thread: bool = False
    ) -> dict[str, float]:
        """A kernel's roofline features on this device: ``compute_ms`` (FLOPs over peak),
        ``memory_ms`` (bytes over bandwidth), ``roofline_ms`` (the larger), ``intensity`` (FLOP/byte)
        and ``ridge`` (the device's FLOP/byte where compute and memory bounds meet)."""
        peak = self.peak_tflops(precision, single_thread) * 1e12
        bandwidth = self.bandwidth_gbps * 1e9
        compute_ms = flops / peak * 1e3
        memory_ms = bytes_moved / bandwidth * 1e3 if bandwidth else 0.0
        return {
            "compute_ms": compute_ms,
            "memory_ms": memory_ms,
            "roofline_ms": max(compute_ms, memory_ms),
            "intensity": flops / bytes_moved if bytes_moved else float("inf"),
            "ridge": peak / bandwidth if bandwidth else float("inf"),
        }


def roofline_peaks(document: dict[str, Any]) -> RooflinePeaks:
    """The :class:`RooflinePeaks` of a profile document."""
    peaks = document.get("peaks") or peaks_of(document)
    return RooflinePeaks(
        device=document["device"],
        device_name=document.get("device_name", ""),
        tflops=dict(peaks["tflops"]),
        bandwidth_gbps=float(peaks["bandwidth_gbps"] or 0.0),
        hbm_peak_gbps=peaks.get("hbm_peak_gbps"),
    )


def load_roofline(path: str | os.PathLike[str], device: str | None = None) -> RooflinePeaks:
    """Read the peaks of a saved profile.

    Args:
        path: a ``device_profile.json``, a folder holding one, or a data directory (with ``device``).
        device: ``cpu`` or ``cuda`` when ``path`` is a data directory.

    Raises:
        HaseError: no profile there, or one this code cannot read.
    """
    candidate = Path(path)
    if candidate.is_dir() and not (candidate / PROFILE_FILE).exists() and device is not None:
        candidate = device_profile_dir(candidate, device)
    return roofline_peaks(read_profile(candidate))
