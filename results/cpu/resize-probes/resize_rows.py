"""Keep only the Resize kernels of exported tables (the `resize` probes' own: their stems and 1x1 convolutions
stay out, as they moved other families' trees when merged whole).

    .venv/bin/python results/cpu/resize-probes/resize_rows.py results/cpu/resize-probes/tables OUT
    .venv/bin/hase merge-tables results/cpu/tables results/cpu/tables OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def main() -> int:
    if len(sys.argv) != 3:
        print("hase: error: usage: resize_rows.py TABLES OUT", file=sys.stderr)
        return 2
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    benchmarks = pd.read_parquet(source / "kernel_benchmarks.parquet")
    resize = set(benchmarks.instance_id[benchmarks.op_type == "Resize"])
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.parquet")):
        table = pd.read_parquet(path)
        if "instance_id" in table:
            table = table[table.instance_id.isin(resize)]
        table.to_parquet(out / path.name, index=False)
        print(f"{path.name}: {len(table)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
