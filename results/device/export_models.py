"""Export torchvision zoo models to ONNX for the GPU memory step of results/device/run.sh:
``python results/device/export_models.py OUT_DIR BATCHES MODELS`` (comma-separated), 224 px, opset 17."""

import sys
from pathlib import Path

from hase_dagster.analysis.zoo import ModelVariant, export_variant
from hase_dagster.core.config import ZooModel


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: export_models.py OUT_DIR BATCHES MODELS", file=sys.stderr)
        return 2
    out, batches, names = Path(argv[0]), [int(b) for b in argv[1].split(",")], argv[2].split(",")
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for batch in batches:
            print(export_variant(ModelVariant(ZooModel(name=name), 224, batch), out, opset=17).path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
