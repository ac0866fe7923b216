"""A controlled check of the staged-Split wait: twin networks that differ only in whether ORT's CUDA Split stages its
arguments in pinned host memory (pieces of unequal length) or passes them by value (equal pieces).

Each network is ``blocks`` times: 1x1 convolution (C -> C), Split along the channels into two pieces, a 1x1
convolution on each piece, Concat of the two (two inputs: by value either way), Relu. ``staged`` splits C into
C/4 and 3C/4, ``equal`` into two halves; the convolutions' total work is close between the twins. Files are named
``split_{staged|equal}_k{blocks}_c{C}_i{size}_b{batch}.onnx``.

    python3 results/gpu-general/staged_split_study.py export DIR [--blocks 4,16] [--batches 1,16,64]
    python3 results/gpu-general/staged_split_study.py score TIMINGS_DIR [--predictions DIR]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(kind: str, blocks: int, channels: int, size: int, batch: int) -> onnx.ModelProto:
    """The network described in the module docstring."""
    rng = np.random.default_rng(blocks * 1000 + channels)
    first = channels // 4 if kind == "staged" else channels // 2
    pieces = [first, channels - first]
    nodes, inits = [], []
    x = "x"

    def weight(name: str, out_c: int, in_c: int) -> str:
        values = (rng.standard_normal((out_c, in_c, 1, 1)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(values, name))
        return name

    inits.append(numpy_helper.from_array(np.array(pieces, dtype=np.int64), "split_sizes"))
    for b in range(blocks):
        nodes.append(helper.make_node("Conv", [x, weight(f"w{b}", channels, channels)], [f"c{b}"], name=f"conv{b}"))
        pieces_out = [f"s{b}a", f"s{b}b"]
        nodes.append(helper.make_node("Split", [f"c{b}", "split_sizes"], pieces_out, axis=1, name=f"split{b}"))
        wa = weight(f"wa{b}", pieces[0], pieces[0])
        wb = weight(f"wb{b}", pieces[1], pieces[1])
        nodes.append(helper.make_node("Conv", [f"s{b}a", wa], [f"p{b}a"], name=f"conva{b}"))
        nodes.append(helper.make_node("Conv", [f"s{b}b", wb], [f"p{b}b"], name=f"convb{b}"))
        nodes.append(helper.make_node("Concat", [f"p{b}a", f"p{b}b"], [f"j{b}"], axis=1, name=f"concat{b}"))
        nodes.append(helper.make_node("Relu", [f"j{b}"], [f"r{b}"], name=f"relu{b}"))
        x = f"r{b}"
    graph = helper.make_graph(
        nodes,
        f"split_{kind}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, channels, size, size])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def export(out: Path, blocks: list[int], batches: list[int], channels: int, size: int) -> list[Path]:
    """Write every twin at every block count and batch size into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in ("staged", "equal"):
        for k in blocks:
            for b in batches:
                path = out / f"split_{kind}_k{k}_c{channels}_i{size}_b{b}.onnx"
                onnx.save(build(kind, k, channels, size, b), path)
                paths.append(path)
    return paths


NAME = re.compile(r"split_(staged|equal)_k(\d+)_c(\d+)_i\d+_b(\d+)\.onnx")


def score(timings: Path, predictions: Path | None) -> str:
    """Per block count, channels, batch and level: the staged twin's extra time over the equal one, per staged Split,
    measured (and predicted where ``predictions`` holds ``hase predict --json`` files)."""
    measured: dict[tuple, float] = {}
    for path in sorted(timings.glob("level-*.json")):
        for row in json.loads(path.read_text()):
            m = NAME.fullmatch(row["model"])
            if m and row.get("status") == "ok":
                measured[(m[1], int(m[2]), int(m[3]), int(m[4]), float(row["stress_level"]))] = float(row["mean_ms"])
    predicted: dict[tuple, float] = {}
    for path in sorted(predictions.glob("*.json")) if predictions else []:
        for row in json.loads(path.read_text())["predictions"]:
            m = NAME.fullmatch(Path(row["model"]).name)
            source = row["load_source"]
            level = 0.0 if source.startswith("idle") else float(re.search(r"level=([\d.]+)", source).group(1))
            if m:
                predicted[(m[1], int(m[2]), int(m[3]), int(m[4]), level)] = float(row["predicted_ms"])
    lines = [
        "| blocks | channels | batch | stress | equal ms | staged ms | extra ms a staged Split | predicted extra |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, k, c, b, level in sorted(key for key in measured if key[0] == "staged"):
        twin = measured.get(("equal", k, c, b, level))
        if twin is None:
            continue
        staged = measured[(kind, k, c, b, level)]
        p_staged, p_equal = predicted.get((kind, k, c, b, level)), predicted.get(("equal", k, c, b, level))
        p_extra = f"{(p_staged - p_equal) / k:.3f}" if p_staged is not None and p_equal is not None else "-"
        extra = (staged - twin) / k
        lines.append(f"| {k} | {c} | {b} | {level:.1f} | {twin:.3f} | {staged:.3f} | {extra:.3f} | {p_extra} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("out", type=Path)
    ex.add_argument("--blocks", default="4,16")
    ex.add_argument("--batches", default="1,16,64")
    ex.add_argument("--channels", type=int, default=64)
    ex.add_argument("--size", type=int, default=28)
    sc = sub.add_parser("score")
    sc.add_argument("timings", type=Path)
    sc.add_argument("--predictions", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "export":
        blocks = [int(x) for x in args.blocks.split(",")]
        batches = [int(x) for x in args.batches.split(",")]
        for path in export(args.out, blocks, batches, args.channels, args.size):
            print(path.name)
    else:
        print(score(args.timings, args.predictions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
