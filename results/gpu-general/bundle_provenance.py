"""Write a bundle's provenance without the facts a new fit derives again (``training``, ``composition_of``,
``compute_floor``, ``calibrated_from``, ``host_reference``), as the JSON ``hase predictor export --provenance`` takes,
with ``--add KEY TEXT`` facts added (the rows a candidate bundle is trained on).

    python3 results/gpu-general/bundle_provenance.py results/bundles/h200 OUT.json [--add group_conv_rows "..."]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DERIVED_BY_A_FIT = ("training", "composition_of", "compute_floor", "calibrated_from", "host_reference")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, help="bundle folder (its bundle.json)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--add", nargs=2, action="append", default=[], metavar=("KEY", "TEXT"))
    args = parser.parse_args()
    provenance = json.loads((args.bundle / "bundle.json").read_text())["provenance"]
    kept = {k: v for k, v in provenance.items() if k not in DERIVED_BY_A_FIT}
    args.out.write_text(json.dumps(kept | dict(args.add)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
