"""Materialize the asset graph through the Dagster instance (DAGSTER_HOME), stage by stage, so
every run shows in the UI. This is what ``make run`` calls."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import dagster as dg

from hase_dagster.config import load_config, select_profile

REPOSITORY = Path(__file__).resolve().parent.parent


# Dagster's console logger at INFO: progress lines, not every engine event.
QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def project_instance() -> dg.DagsterInstance:
    """The persistent Dagster instance: DAGSTER_HOME, or the project's ``.dagster_home``
    (created with the repository's ``dagster.yaml``) when it is not set."""
    home = Path(os.environ.get("DAGSTER_HOME") or REPOSITORY / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists() and (REPOSITORY / "dagster.yaml").exists():
        shutil.copy(REPOSITORY / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.get()


def add_batch_sizes(batch_sizes: list[int], instance: dg.DagsterInstance | None = None) -> list[str]:
    """Add batch-size partitions the instance lacks; return the ones added."""
    from assets.partitions import batch_size_partitions

    instance = instance or project_instance()
    existing = set(instance.get_dynamic_partitions(batch_size_partitions.name))
    missing = [str(b) for b in batch_sizes if str(b) not in existing]
    if missing:
        instance.add_dynamic_partitions(batch_size_partitions.name, missing)
    return missing


def materialize_all(
    profile_name: str | None = None,
    batch_sizes: list[int] | None = None,
    instance: dg.DagsterInstance | None = None,
) -> dict[str, Any]:
    """Materialize every asset for every partition of ``profile_name``; return what ran."""
    from hase_dagster.definitions import defs
    from resources.hase import HaseResource

    profile = select_profile(load_config(), profile_name)
    instance = instance or project_instance()
    batches = batch_sizes or profile.batch_sizes
    add_batch_sizes(batches, instance)
    job = defs.resolve_job_def("analysis_job")
    runs = []
    for batch in batches:
        result = job.execute_in_process(
            partition_key=str(batch),
            instance=instance,
            resources={"hase": HaseResource(profile_name=profile.name)},
            raise_on_error=False,
            tags={"hase/profile": profile.name},
            run_config=QUIET,
        )
        runs.append(
            {
                "stage": "analysis",
                "partition": str(batch),
                "status": "SUCCESS" if result.success else "FAILURE",
                "run_id": result.run_id,
            }
        )
    return {"profile": profile.name, "runs": runs}
