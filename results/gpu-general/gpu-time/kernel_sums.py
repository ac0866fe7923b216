"""A bundle's idle kernel predictions against CUPTI's kernel time per run (``gpu_time.jsonl``): per file
the predicted idle sum of its non-view kernels less 2.48 us a kernel (the standalone device clock's own
share, fitted on the training networks; README) over the measured GPU kernel time. Prints the median
ratio and the share within +-10% per folder of ``--files`` (as exported: anch, the training networks;
ckg, the independent generator; ns2, the second never-seen set) and per batch size.

    .venv/bin/python results/gpu-general/gpu-time/kernel_sums.py results/bundles/h100 \
        --files /tmp/anch /tmp/ckg /tmp/ns2     # the ONNX files as gpu-time/README.md exports them
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from hase_dagster.learn.bundles import load_bundle
from hase_dagster.learn.graph_factors import read_cupti_times, read_graph_factors
from hase_dagster.learn.predict import VIEW_FAMILIES

HERE = Path(__file__).resolve().parent
STANDALONE_US_PER_KERNEL = 2.48


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--files", type=Path, nargs="+", required=True, help="folders of the study's ONNX files")
    parser.add_argument("--graph-factors", type=Path, help="scale the bundle's kernels by these factors instead")
    parser.add_argument(
        "--cupti", type=Path, nargs="+", default=[HERE / "gpu_time.jsonl"], help="GPU-time rows (default: this study's)"
    )
    args = parser.parse_args()
    bundle = load_bundle(args.bundle)
    if args.graph_factors:
        bundle.predictor.regressor.graph_factors = read_graph_factors(args.graph_factors)
    measured = read_cupti_times(args.cupti)  # the last row of a file wins
    rows = []
    for name, gpu_ms in sorted(measured.items()):
        path = next((folder / name for folder in args.files if (folder / name).exists()), None)
        if path is None:
            continue
        batch = int(re.search(r"_b(\d+)\.onnx$", name).group(1))
        (prediction,) = bundle.predict([path], [batch], ["idle"])
        kernels = [k for k in prediction.kernels if k.family not in VIEW_FAMILIES]
        predicted = sum(k.mean_ms for k in kernels) - STANDALONE_US_PER_KERNEL * 1e-3 * len(kernels)
        folder = path.parent.name
        rows.append({"set": folder, "file": name, "batch_size": batch, "ratio": predicted / gpu_ms})
    frame = pd.DataFrame(rows)
    frame["within_10"] = (frame.ratio - 1).abs() <= 0.10

    def summary(group: pd.DataFrame) -> pd.Series:
        return pd.Series(
            {
                "files": len(group),
                "median ratio": round(group.ratio.median(), 3),
                "mean |error| %": round(100 * (group.ratio - 1).abs().mean(), 1),
                "within +-10 %": round(100 * group.within_10.mean()),
            }
        )

    print(f"bundle {args.bundle}: {len(frame)} files\n")
    print(summary(frame).to_frame("all").T.to_markdown(), "\n")
    for key in ("set", "batch_size"):
        print(frame.groupby(key).apply(summary, include_groups=False).to_markdown(), "\n")


if __name__ == "__main__":
    main()
