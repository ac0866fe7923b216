"""The dispatch study's per-op host times (dispatch_study.py's JSON lines) beside a bundle's op weights, as markdown.

Each op type's median node time over the training-side networks (set AR's twelve are left out: they are a blind set),
over the median of every launching node's, next to the weights the bundle's composition took from the analysis's
in-graph node times (``learn.dispatch``).

    .venv/bin/python results/gpu-general/dispatch/summarize.py results/gpu-general/dispatch/h100/dispatch.jsonl \
        results/gpu-general/dispatch/h100-op-weights-predictor.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from hase_dagster.learn.predict import VIEW_FAMILIES

# set AR's networks (results/cpu-general/gpu-setAR): hand_ops_set seeds 1029-1034, generator seeds 4012-4017
BLIND = re.compile(r"^(hops_s10(29|3[0-4])|chk_s401[2-7])_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("bundle", type=Path, help="a bundle folder, or a predictor.json")
    parser.add_argument("--min-nodes", type=int, default=5)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.study.read_text().splitlines()]
    training = [r for r in rows if not BLIND.match(r["file"]) and "nodes" in r]
    by_op: dict[str, list[float]] = defaultdict(list)
    for row in training:
        for node in row["nodes"]:
            if node["op_type"] not in VIEW_FAMILIES:
                by_op[node["op_type"]].append(node["us"])
    typical = float(np.median([us for values in by_op.values() for us in values]))
    predictor = args.bundle if args.bundle.is_file() else args.bundle / "predictor" / "predictor.json"
    composition = json.loads(predictor.read_text())["composition"]
    weights = composition.get("op_dispatch_weights") or {}
    print(
        f"{len(training)} training-side files, {sum(map(len, by_op.values()))} launching nodes, typical {typical} us\n"
    )
    print("| op type | nodes | median us | study weight | bundle weight |")
    print("|---|---|---|---|---|")
    for op, values in sorted(by_op.items(), key=lambda item: -len(item[1])):
        if len(values) < args.min_nodes:
            continue
        bundle = weights.get(op)
        shown = f"{bundle:.2f}" if bundle is not None else "- (1)"
        print(f"| {op} | {len(values)} | {np.median(values):.1f} | {np.median(values) / typical:.2f} | {shown} |")
    print("\n| file | clean mean ms | profiled run ms | node sum ms | host loop ms |")
    print("|---|---|---|---|---|")
    for row in rows:
        if "nodes" in row:
            print(
                f"| {row['file']} | {row['clean_mean_ms']:.3f} | {row['run_ms']:.3f} | {row['node_sum_ms']:.3f} | "
                f"{row['host_loop_ms']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
