"""Each ONNX file's operator counts and input shape, as JSON: one machine's exports compared with another's
(a set exported on the GPU host and again here for the predictions must be the same graphs).

    python3 results/cpu-general/onnx_ops.py FOLDER > ops.json
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import onnx


def main() -> int:
    folder = Path(sys.argv[1])
    summary = {}
    for path in sorted(folder.glob("*.onnx")):
        model = onnx.load(str(path), load_external_data=False)
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        summary[path.name] = {"input": dims, "ops": dict(sorted(Counter(n.op_type for n in model.graph.node).items()))}
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
