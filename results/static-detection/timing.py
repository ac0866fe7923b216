"""Wall time of detect_kernels per model (onnx.load, shape inference, rules), each model five
times in one process after one warm-up call, median reported; models at batch 1 (ViT-B/16 also
at 64), written as ONNX files first so that loading is part of the time.

Usage: .venv/bin/python results/static-detection/timing.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import cuda_agreement as ca  # noqa: E402

from hase_dagster.analysis.fusion_rules import FusionRules  # noqa: E402
from hase_dagster.analysis.static_detect import detect_kernels  # noqa: E402


def main() -> None:
    rules = FusionRules.load(ca.RULES_FILE)
    files, _ = ca.load_cases()
    chosen = files[(files.batch_size == 1) | (files.variant_id == "vit_b_16_i224_b64")]
    chosen = chosen.drop_duplicates("model_name", keep="first")._append(files[files.variant_id == "vit_b_16_i224_b64"])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in chosen.itertuples():
            path = Path(tmp) / f"{row.variant_id}.onnx"
            onnx.save(ca.model_of(row), path)
            detect_kernels(path, rules, row.variant_id)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                detection = detect_kernels(path, rules, row.variant_id)
                times.append(time.perf_counter() - start)
            out.append(
                {
                    "variant_id": row.variant_id,
                    "file_mb": round(path.stat().st_size / 1e6, 1),
                    "kernels": len(detection.kernels),
                    "median_s": statistics.median(times),
                    "max_s": max(times),
                }
            )
            print(out[-1], flush=True)
    (HERE / "timing.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
