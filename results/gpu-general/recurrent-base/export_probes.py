"""Export a probe profile's networks (default gpu_design_space_recurrent, seeds 9950-9985) at the given batch sizes,
as the analysis stage names them (``dsr_s<seed>_i224_b<batch>.onnx``), for device-free predictions of the networks
``time_probes.sh`` (or ``time_files.py``) timed whole, and for the composition's ``--timings``.

    .venv/bin/python results/gpu-general/recurrent-base/export_probes.py OUT --batch-sizes 1,16,64 \
        [--profile gpu_design_space_image_io]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import load_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--profile", default="gpu_design_space_recurrent")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = load_config("hase.yaml").profiles
    if args.profile not in profiles:
        raise SystemExit(f"export_probes: error: hase.yaml has no profile {args.profile!r}")
    profile = profiles[args.profile]
    for model in profile.models:
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            print(export_variant(ModelVariant(model, 224, batch), args.out, 17).path, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
