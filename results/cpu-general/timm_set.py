"""Export timm image models (random weights, nothing downloaded) at their own input size and each batch size into
a folder, named as the checker sets name them (``NAME_iSIZE_bB.onnx``), each validated by one ORT run.

timm (PyTorch Image Models) is not a dependency of Hase and no profile, probe or earlier set drew from it: its
architectures (hybrid convolution-attention, metaformers, ghost and mixed-kernel blocks, multi-branch HRNet,
aggregation trees) are what a user would bring. Install it beside the project, not into it:

    .venv/bin/pip install --no-deps --target /tmp/timm-site timm==1.0.31
    PYTHONPATH=/tmp/timm-site .venv/bin/python results/cpu-general/timm_set.py DIR --batch-sizes 1,4,16,64 \
        [--jobs 6] [--ep cuda] levit_128s mobilevit_xs ...

A model that does not export or validate is named on stderr and left out (``timm-failed.json``); ``timm.json``
lists the files made, with each model's parameters and input size.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from export_torchvision import export_each, export_parser  # this folder's script, beside this one


def export_model(name: str, out: Path, batches: list[int], ep: str) -> dict:
    """Export timm's ``name`` at each batch size into ``out``.

    Returns:
        ``{"name", "input_size", "params", "files"}``, or ``{"name", "error"}`` when it failed.
    """
    import timm
    import torch

    from hase_dagster.analysis.zoo import trace_to_onnx, validate_onnx

    torch.set_num_threads(1)  # one export per process when --jobs runs several
    torch.manual_seed(17)
    try:
        module = timm.create_model(name, pretrained=False).eval()
        size = int(module.pretrained_cfg.get("input_size", (3, 224, 224))[-1])
        files = []
        for batch in batches:
            path = out / f"{name}_i{size}_b{batch}.onnx"
            partial_path = path.with_suffix(".onnx.partial")
            trace_to_onnx(module, torch.randn(batch, 3, size, size), partial_path, 17)
            validate_onnx(partial_path, ep)
            partial_path.rename(path)
            files.append(path.name)
        params = sum(p.numel() for p in module.parameters())
        return {"name": name, "input_size": size, "params": params, "files": files}
    except Exception as err:  # a model timm or the exporter cannot do is left out, named
        return {"name": name, "error": f"{type(err).__name__}: {str(err)[:300]}"}


def main() -> int:
    parser = export_parser(__doc__.splitlines()[0])
    parser.add_argument("--ep", default="cpu", choices=("cpu", "cuda"), help="where each file is validated")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    made = export_each(partial(export_model, out=args.out, batches=batches, ep=args.ep), args.models, args.jobs)
    failed = [m for m in made if "error" in m]
    for m in failed:
        print(f"timm_set: {m['name']} left out: {m['error']}", file=sys.stderr)
    (args.out / "timm-failed.json").write_text(json.dumps(failed, indent=1))
    (args.out / "timm.json").write_text(json.dumps([m for m in made if "error" not in m], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
