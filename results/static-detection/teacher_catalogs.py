"""Fingerprinted kernel catalogs of ONNX files on one EP, as fusion-rule teacher examples (run where the EP is).

For each ``*.onnx`` in FOLDER, ORT's optimized graph and profile on EP are analysed (``analysis.analyze``) and the
catalog's kernels (absorbed op names included, which ``hase analyze --json`` leaves out) are written to
``OUT/<stem>.json``. ``learn_extra_rules.py`` learns fusion rules from them on a machine without the EP.

    python3 results/static-detection/teacher_catalogs.py FOLDER OUT --ep cuda [--jobs 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def catalog_of(model: Path, ep: str, out: Path) -> str:
    """Analyse ``model`` on ``ep`` and write its catalog into ``out``; returns a one-line status."""
    from hase_dagster.analysis.analyze import analyze_model
    from hase_dagster.core.ort_runtime import device_name

    target = out / f"{model.stem}.json"
    if target.exists():
        return f"{model.name}: done before"
    with tempfile.TemporaryDirectory() as tmp:
        analysis = analyze_model(model, ep, Path(tmp) / "optimized.onnx")
    catalog = analysis.catalog()
    document = {"model": model.name, "ep": ep, "device": device_name(ep), "kernels": catalog["kernels"]}
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(document, default=str))
    partial.replace(target)
    return f"{model.name}: {len(catalog['kernels'])} kernels"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ep", default="cuda")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = sorted(args.folder.glob("*.onnx"))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for status in pool.map(catalog_of, models, [args.ep] * len(models), [args.out] * len(models)):
            print(status, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
