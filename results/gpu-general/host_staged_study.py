"""Does a host-staged CUDA kernel wait for a time-slicing co-tenant on its own? A controlled check of
``learn.predict.HOST_STAGED_LIMIT``: networks of 16 blocks, each block 32 or 33 parallel 1x1 convolutions of
the block's input joined by one Concat (ORT passes up to 32 inputs by value and stages more in host memory)
and a 1x1 convolution back; ``s{k}`` has k blocks of 33, so the networks differ in k staged Concats and
almost nothing else.

    python3 results/gpu-general/host_staged_study.py export DIR [--wide]   # the ONNX files (batch 1 and 16)
    python3 results/cpu-general/time_files.py DIR OUT --profile gpu --levels 0.0,1.0,0.5   # on the GPU host
    .venv/bin/python results/gpu-general/host_staged_study.py score OUT DIR --bundle results/bundles/h100
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

STAGED_BLOCKS = (0, 4, 8, 16)
BATCHES = (1, 16)
BLOCKS = 16
CHANNELS = 16
SIZE = 28


def network(path: Path, staged: int, batch: int, base_width: int = 2) -> Path:
    """Write ``s{staged}``: BLOCKS blocks, the first ``staged`` of them with 33 branches, the rest with 32;
    branch i has ``base_width + i % 3`` output channels (``wide``: 32-34, so the Concat's output has over a
    thousand channels, as DenseNet-201's late Concats have, and its staged index arrays are that long)."""
    import onnx
    from onnx import TensorProto, helper

    nodes, weights = [], []
    current = "x"
    for block in range(BLOCKS):
        branches = 33 if block < staged else 32
        names, total = [], 0
        for i in range(branches):
            width = base_width + i % 3  # unequal widths, as DenseNet's Concat inputs are
            total += width
            w = f"w{block}_{i}"
            weights.append(
                helper.make_tensor(w, TensorProto.FLOAT, [width, CHANNELS, 1, 1], np.full(width * CHANNELS, 0.01))
            )
            nodes.append(helper.make_node("Conv", [current, w], [f"b{block}_{i}"], name=f"conv{block}_{i}"))
            names.append(f"b{block}_{i}")
        nodes.append(helper.make_node("Concat", names, [f"cat{block}"], axis=1, name=f"concat{block}"))
        back = f"back{block}"
        weights.append(
            helper.make_tensor(back, TensorProto.FLOAT, [CHANNELS, total, 1, 1], np.full(CHANNELS * total, 0.01))
        )
        nodes.append(helper.make_node("Conv", [f"cat{block}", back], [f"y{block}"], name=f"project{block}"))
        current = f"y{block}"
    graph = helper.make_graph(
        nodes,
        f"s{staged}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, CHANNELS, SIZE, SIZE])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [batch, CHANNELS, SIZE, SIZE])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # opset 17's IR: an onnx newer than the GPU host's ORT would write one it refuses
    onnx.save(model, path)
    return path


def export(folder: Path, wide: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if wide:
        for staged in (0, 16):
            for batch in BATCHES:
                network(folder / f"wide_s{staged}_b{batch}.onnx", staged, batch, base_width=32)
        return
    for staged in STAGED_BLOCKS:
        for batch in BATCHES:
            network(folder / f"staged_s{staged}_b{batch}.onnx", staged, batch)


def score(timings: Path, files: Path, bundle_dir: str) -> None:
    """Measured and predicted mean per file and level, and each network's time over s0's at its batch."""
    import pandas as pd

    from hase_dagster.learn.bundles import load_bundle
    from hase_dagster.learn.predict import host_staged_kernels

    rows = [r for p in sorted(timings.glob("level-*.json")) for r in json.loads(p.read_text()) if r["status"] == "ok"]
    measured = pd.DataFrame(rows)[["model", "batch_size", "stress_level", "mean_ms"]]
    bundle = load_bundle(bundle_dir)
    loads = {0.0: "idle", 0.5: "level=0.5", 1.0: "level=1.0"}
    out = []
    for r in measured.itertuples():
        path = files / r.model
        kernels, _ = bundle.kernels(path, int(r.batch_size))
        (prediction,) = bundle.predict([path], [int(r.batch_size)], [loads[float(r.stress_level)]])
        out.append(
            {
                "network": r.model.removesuffix(".onnx"),
                "batch": int(r.batch_size),
                "stress": float(r.stress_level),
                "staged": host_staged_kernels(kernels),
                "measured ms": r.mean_ms,
                "predicted ms": prediction.predicted_ms,
            }
        )
    frame = pd.DataFrame(out).sort_values(["batch", "stress", "network"])

    def family(network: str) -> str:
        return network.split("_s")[0] if network.startswith(("staged_s", "wide_s")) else network

    # each network against the s0 network of its own family, batch and stress level (none for the others)
    base = {
        (family(n), b, s): (m, p)
        for n, b, s, m, p in zip(
            frame.network, frame.batch, frame.stress, frame["measured ms"], frame["predicted ms"], strict=True
        )
        if n.startswith(("staged_s0_", "wide_s0_"))
    }
    keys = [(family(n), b, s) for n, b, s in zip(frame.network, frame.batch, frame.stress, strict=True)]
    frame["measured over s0, ms"] = [
        m - base[k][0] if k in base else float("nan") for m, k in zip(frame["measured ms"], keys, strict=True)
    ]
    frame["predicted over s0, ms"] = [
        p - base[k][1] if k in base else float("nan") for p, k in zip(frame["predicted ms"], keys, strict=True)
    ]
    frame["error %"] = (frame["predicted ms"] / frame["measured ms"] - 1) * 100
    print(frame.round(2).to_markdown(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    exporting = sub.add_parser("export")
    exporting.add_argument("folder", type=Path)
    exporting.add_argument("--wide", action="store_true", help="s0 and s16 with 32-34-channel branches")
    scoring = sub.add_parser("score")
    scoring.add_argument("timings", type=Path)
    scoring.add_argument("files", type=Path)
    scoring.add_argument("--bundle", default="results/bundles/h100")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.wide)
    else:
        score(args.timings, args.files, args.bundle)


if __name__ == "__main__":
    main()
