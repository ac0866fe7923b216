"""The command line the probe-grid exporters share (``downsample-rows/export_grid.py``,
``dense-conv-rows/export_grid.py``): ``--list`` prints the grid's configuration names, one a line; ``OUT_DIR
[BATCHES]`` writes each configuration at each batch size (comma-separated, default 1,16,64) as
``OUT_DIR/NAME_bB.onnx``, skipping files already there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path


def grid_main(argv: Sequence[str], names: Sequence[str], write: Callable[[Path, int, int], None]) -> int:
    """Run the command line.

    Args:
        argv: the arguments after the program name.
        names: each configuration's name, in draw order.
        write: ``write(path, index, batch)`` writes configuration ``index`` at ``batch`` to ``path``.

    Returns:
        The exit status (0).
    """
    if list(argv) == ["--list"]:
        print("\n".join(names))
        return 0
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    batches = [int(x) for x in argv[1].split(",")] if len(argv) > 1 else [1, 16, 64]
    written = 0
    for index, name in enumerate(names):
        for batch in batches:
            path = out / f"{name}_b{batch}.onnx"
            if not path.exists():
                write(path, index, batch)
                written += 1
    print(
        written,
        "files written,",
        sum(1 for n in names for b in batches if (out / f"{n}_b{b}.onnx").exists()),
        "of the grid in",
        out,
    )
    return 0
