"""Where a CUDA EP session's memory goes (issue 15 B, the measurement check): for each model and
CUDA EP setting, one child process builds the session (ORT_ENABLE_ALL, EXHAUSTIVE search as
`hase memory`), runs it 2 + 5 times, and reports NVML's per-process delta, cudaMemGetInfo's delta and
torch-free ``nvidia-smi``-style figures, while ORT's verbose log says what its BFC arena did: each
region it extended by (``Extended allocation by``), what it reserved outside the regions
(``Reserving memory``: initializers, transient cuDNN search workspaces), and the requests that made it
grow. Measured minus (regions + reserved) is what ORT's arena does not hold (handles, kernels).

    python results/device/arena_log.py OUT.json MODEL.onnx ... [--ep cpu]   # cpu: rehearsal of the log parser
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

SETTINGS = {
    "default": {},
    "same_as_requested": {"arena_extend_strategy": "kSameAsRequested"},
    "no_max_workspace": {"cudnn_conv_use_max_workspace": "0"},
    "heuristic": {"cudnn_conv_algo_search": "HEURISTIC"},
}
EXTENDING = re.compile(r"Extending BFCArena for (\w+)\..*rounded_bytes:(\d+)")
EXTENDED = re.compile(r"Extended allocation by (\d+) bytes")
RESERVING = re.compile(r"Reserving memory in BFCArena for (\w+) size: (\d+)")


def child(model: str, setting: str, ep: str) -> None:
    import numpy as np
    import onnxruntime as ort

    meter = None
    if ep == "cuda":
        sys.path.insert(0, os.getcwd())
        from hase_dagster.measure.model_memory import MemoryMeter

        meter = MemoryMeter("cuda")
        ort.preload_dlls()
    before = meter.read() if meter else None
    ort.set_default_logger_severity(0)
    options = ort.SessionOptions()
    options.log_severity_level, options.log_verbosity_level = 0, 1
    cuda = {"cudnn_conv_algo_search": "EXHAUSTIVE", **SETTINGS[setting]}
    providers = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"] if ep == "cuda" else ["CPUExecutionProvider"]
    session = ort.InferenceSession(model, options, providers=providers)
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in session.get_inputs()[0].shape]
    feed = {session.get_inputs()[0].name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    for _ in range(7):
        session.run(None, feed)
    row = {"model": model, "setting": setting, "cuda_options": cuda}
    if meter is not None and before is not None:
        row.update(meter.columns(before, meter.read(), session))
    print("ROW " + json.dumps(row), flush=True)


def parse(log: str) -> dict:
    arena, regions, requests, reserved = None, {}, {}, {}
    for line in log.splitlines():
        if m := EXTENDING.search(line):
            arena = m.group(1)
            requests.setdefault(arena, []).append(int(m.group(2)))
        elif (m := EXTENDED.search(line)) and arena:
            regions.setdefault(arena, []).append(int(m.group(1)))
        elif m := RESERVING.search(line):
            reserved[m.group(1)] = reserved.get(m.group(1), 0) + int(m.group(2))
    return {
        "arena_regions_bytes": regions,
        "arena_total_bytes": {k: sum(v) for k, v in regions.items()},
        "extend_requests_bytes": requests,
        "reserved_bytes": reserved,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], argv[3])
        return 0
    ep = "cpu" if "--ep" in argv and argv[argv.index("--ep") + 1] == "cpu" else "cuda"
    paths = [a for a in argv if a.endswith(".onnx")]
    out = argv[0]
    rows: list[dict] = []
    # Setting-major, and the file rewritten after every session: a run cut short still has every
    # model under the default settings, the case `hase memory` measures.
    for setting in SETTINGS if ep == "cuda" else ["default"]:
        for model in paths:
            done = subprocess.run(
                [sys.executable, __file__, "--child", model, setting, ep], capture_output=True, text=True
            )
            found = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
            row = json.loads(found[0]) if found else {"model": model, "setting": setting, "error": done.stderr[-800:]}
            row.update(parse(done.stdout + done.stderr))
            cuda_total = (
                sum(row["arena_total_bytes"].values()) if ep == "cpu" else row["arena_total_bytes"].get("Cuda", 0)
            )
            print(f"{os.path.basename(model)} {setting}: measured {row.get('peak_memory_mb')} MB, arena regions "
                  f"{cuda_total / 1e6:.1f} MB, reserved {row['reserved_bytes']}", flush=True)  # fmt: skip
            rows.append(row)
            write(out, ep, rows)
    write(out, ep, rows)
    return 0


def write(out: str, ep: str, rows: list[dict]) -> None:
    """Write the rows so far, through a temporary file, so that a killed run never leaves half a JSON.

    Args:
        out: the JSON file to write.
        ep: the execution provider the rows were measured on.
        rows: one dict per (setting, model) session so far.
    """
    with open(out + ".partial", "w") as f:
        json.dump({"schema_version": 1, "ep": ep, "rows": rows}, f, indent=1)
    os.replace(out + ".partial", out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
