"""Choose the design-space probes to measure on the GPU (issue 11, item 1: adaptive kernel sampling).

Draws a pool of candidate probes (`hase_dagster/analysis/design_space.py`, seeds START..START+POOL-1),
detects each one's CUDA kernels at batch 1, 16 and 128 with the H100 bundle's fusion rules (no GPU),
has a committee of kernel regressors (one per family of the measured networks left out, trained on
the committed H100 tables) predict them idle and at full load, and picks COUNT probes: most by the
committee's disagreement on kernels not yet covered, a quarter at random (`learn/sampling.py`).

    .venv/bin/python results/gpu-general/design-space/select_probes.py \
        --tables results/gpu-general/tables --bundle results/bundles/h100 --start 1000 --pool 400 --count 48 \
        --out results/gpu-general/design-space/selection.json
    # depthwise convolutions (design_space's depthwise space; issue 11, 2026-11-24 afternoon)
    .venv/bin/python results/gpu-general/design-space/select_probes.py \
        --tables results/gpu-general/tables --bundle results/bundles/h100 --space depthwise --start 8000 \
        --pool 300 --count 20 --out results/gpu-general/design-space/selection-depthwise.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=Path, required=True)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--start", type=int, default=1000)
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--count", type=int, default=48)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 128])
    parser.add_argument("--space", default="cells", help="the probe space (design_space.PROBE_SPACES)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch

    from hase_dagster.analysis.design_space import build_probe_network, draw_probe
    from hase_dagster.analysis.zoo import trace_to_onnx
    from hase_dagster.learn.bundles import load_bundle, loads_by_level
    from hase_dagster.learn.regressor import training_rows
    from hase_dagster.learn.reports import import_tables
    from hase_dagster.learn.sampling import CandidateScore, choose, committee, kernel_spreads
    from hase_dagster.learn.training import architecture_families

    started = time.time()
    bundle = load_bundle(args.bundle)
    with tempfile.TemporaryDirectory() as tmp:
        store = import_tables(args.tables, Path(tmp) / "t.duckdb")
        rows = training_rows(store, "cuda")
        families = architecture_families(store)
        levels = loads_by_level(store, "cuda")
        loads = [levels[min(levels)], levels[max(levels)]]
        members = committee(rows, "cuda", families)
        print(f"committee of {len(members)} trained on {len(rows)} rows in {time.time() - started:.0f} s", flush=True)
        candidates, specs = [], {}
        for seed in range(args.start, args.start + args.pool):
            path = Path(tmp) / f"probe_{seed}.onnx"
            trace_to_onnx(
                build_probe_network(seed, space=args.space), torch.randn(2, 3, 224, 224), path, 17, dynamic_batch=True
            )
            spreads: dict[str, float] = {}
            for batch in args.batches:
                kernels, _ = bundle.kernels(path, batch)
                spreads.update(kernel_spreads(members, kernels, loads))
            candidates.append(CandidateScore(str(seed), spreads))
            specs[str(seed)] = draw_probe(seed, args.space).to_dict()
        print(f"{len(candidates)} candidates scored after {time.time() - started:.0f} s", flush=True)
    picked = choose(candidates, args.count, explore_share=0.25, seed=args.start)
    by_name = {c.name: c for c in candidates}
    pool_spread = [float(np.mean(list(c.spreads.values()) or [0])) for c in candidates]
    picked_spread = [float(np.mean(list(by_name[p].spreads.values()) or [0])) for p in picked]
    result = {
        "command": "select_probes.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()),
        "committee": sorted(set(families.values())),
        "training_rows": len(rows),
        "pool": [args.start, args.start + args.pool - 1],
        "picked": [int(p) for p in picked],
        "greedy": args.count - int(round(args.count * 0.25)),
        "mean_kernel_spread_pool": round(float(np.mean(pool_spread)), 4),
        "mean_kernel_spread_picked": round(float(np.mean(picked_spread)), 4),
        "cells_picked": {
            c: sum(specs[p]["cell"] == c for p in picked) for c in sorted({s["cell"] for s in specs.values()})
        },
        "specs": {p: specs[p] for p in picked},
        "seconds": round(time.time() - started),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "specs"}, indent=1))


if __name__ == "__main__":
    main()
