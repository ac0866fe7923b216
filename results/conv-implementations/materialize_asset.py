"""Materialize the conv_implementations asset on this machine's device through the project's Dagster
instance (DAGSTER_HOME), as the UI's "Materialize" does, and copy its report to OUT_DIR.

    python results/conv-implementations/materialize_asset.py --profile gpu OUT_DIR

Exit status 0 when the run and its check succeeded, 1 when the check failed, 2 when the run failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import dagster as dg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)
    from assets.conv_implementations import conv_implementations
    from hase_dagster.core.config import load_config
    from hase_dagster.core.paths import data_dir
    from hase_dagster.core.profiles import select_profile
    from hase_dagster.orchestration.materialize import project_instance
    from resources.sets import hase_resources

    config = load_config()
    profile = select_profile(config, args.profile)
    result = dg.materialize(
        [conv_implementations],
        partition_key=profile.device,
        resources=hase_resources(config.prometheus_url, profile.name),
        instance=project_instance(),
        raise_on_error=False,
        tags={"hase/profile": profile.name},
    )
    source = data_dir() / "conv_implementations"
    checks = result.get_asset_check_evaluations()
    print(
        f"run {result.run_id}: {'SUCCESS' if result.success else 'FAILURE'}; checks: "
        + ", ".join(f"{c.check_name}={'passed' if c.passed else 'FAILED'}" for c in checks)
    )
    if source.exists():
        shutil.copytree(source, args.out / "conv-asset", dirs_exist_ok=True)
    if not result.success:
        return 2
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
