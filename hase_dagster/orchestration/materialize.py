"""Materialize the asset graph through the Dagster instance (DAGSTER_HOME), stage by stage, so
every run shows in the UI. This is what ``make run`` calls."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from hase_dagster.core.config import HaseConfig, Profile, data_dir, load_config
from hase_dagster.core.errors import HaseError
from hase_dagster.core.profiles import select_profile

REPOSITORY = Path(__file__).resolve().parents[2]


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


LAUNCHER_TAGS = {"hase/launcher": "materialize"}


def reclaim_crashed_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark runs of ``hase materialize`` whose process is gone (a crash, a kill -9) as failed and
    free their pool slots: a dead run keeps its slot, and every later run would wait for it."""
    import psutil

    reclaimed = []
    unfinished = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED]
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=unfinished, tags=LAUNCHER_TAGS)):
        pid = int(run.tags.get("hase/pid", "0") or 0)
        if pid and not psutil.pid_exists(pid):
            instance.report_run_failed(run, f"the hase materialize process {pid} that ran it is gone")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            reclaimed.append(run.run_id)
    return reclaimed


def run_job(
    job: dg.JobDefinition,
    partition_key: str | dg.MultiPartitionKey | None,
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    profile: str,
) -> dg.ExecuteInProcessResult:
    """Execute ``job`` in this process, tagged so that :func:`reclaim_crashed_runs` can find it."""
    return job.execute_in_process(
        partition_key=partition_key,
        instance=instance,
        resources=resources,
        raise_on_error=False,
        tags={"hase/profile": profile, "hase/pid": str(os.getpid()), **LAUNCHER_TAGS},
        run_config=QUIET,
    )


def preflight(config: HaseConfig, profile: Profile, stress_levels: list[float] | None, data_root: Path) -> None:
    """Refuse, in a second and before any run, what would fail minutes into one: a CUDA profile where
    CUDA does not run, zoo models torchvision does not have, stress levels that are not partitions,
    and a data directory that cannot be written.

    Raises:
        HaseError: naming the problem.
    """
    from hase_dagster.core.config import stress_level_key
    from hase_dagster.core.ort_runtime import cuda_is_usable

    if profile.device == "cuda" and not cuda_is_usable():
        raise HaseError(
            f"profile {profile.name!r} measures on CUDA, which does not run on this machine (no GPU, driver or "
            "CUDA libraries): use the cpu profile"
        )
    import torchvision

    known = set(torchvision.models.list_models(module=torchvision.models))
    unknown = [m.name for m in profile.models if m.kind == "torchvision" and m.name not in known]
    if unknown:
        raise HaseError(f"profile {profile.name!r} names models torchvision does not have: {', '.join(unknown)}")
    partitions = {stress_level_key(level) for level in config.stress_levels}
    off = [level for level in stress_levels or [] if stress_level_key(level) not in partitions]
    if off:
        raise HaseError(f"stress levels {off} are not partitions; the config's are {config.stress_levels}")
    try:
        data_root.mkdir(parents=True, exist_ok=True)
        probe = data_root / ".hase-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise HaseError(f"the data directory {data_root} cannot be written: {exc.strerror or exc}") from exc


def _step_errors(result: dg.ExecuteInProcessResult) -> Iterator[tuple[str | None, Any]]:
    """``(step key, error)`` of each failed step of the run, in order."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            yield event.step_key, event.step_failure_data.error


def was_interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a signal stopped the run (Dagster catches it inside the step and fails the step)."""
    interrupted = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")
    return any(error.cls_name in interrupted for _, error in _step_errors(result))


def first_failure(result: dg.ExecuteInProcessResult) -> str:
    """The first line of the first failed step's error (the run's log holds the rest)."""
    for step_key, error in _step_errors(result):
        cause = error.cause or error
        message = (cause.message or error.message or "").strip().splitlines()
        return f"{step_key}: {message[-1] if message else 'failed'}"
    return "the run failed"


@contextmanager
def stop_on_signal() -> Iterator[list[str]]:
    """SIGINT and SIGTERM interrupt the run in progress (as Ctrl-C does) and are recorded in the
    yielded list, so the caller starts nothing after it."""
    received: list[str] = []

    def interrupt(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def materialize_all(
    profile_name: str | None = None,
    batch_sizes: list[int] | None = None,
    instance: dg.DagsterInstance | None = None,
    stages: tuple[str, ...] = ("analysis", "benchmark", "learning"),
    stress_levels: list[float] | None = None,
) -> dict[str, Any]:
    """Materialize every asset for every partition of ``profile_name``, stage by stage; return what ran.

    A stage runs for a batch size only when the stages before it succeeded for that batch size.
    """
    from hase_dagster.core.config import stress_level_key
    from hase_dagster.definitions import defs
    from resources.sets import hase_resources

    config = load_config()
    profile = select_profile(config, profile_name)
    preflight(config, profile, stress_levels, data_dir())
    instance = instance or project_instance()
    batches = batch_sizes or profile.batch_sizes
    add_batch_sizes(batches, instance)
    reclaim_crashed_runs(instance)
    resources = hase_resources(config.prometheus_url, profile.name)
    runs: list[dict[str, str]] = []

    def record(stage: str, partition: str, result: dg.ExecuteInProcessResult) -> bool:
        failed_checks = [f"{c.check_name}: {c.metadata}" for c in result.get_asset_check_evaluations() if not c.passed]
        runs.append(
            {
                "stage": stage,
                "partition": partition,
                "status": "SUCCESS" if result.success else "FAILURE",
                "run_id": result.run_id,
                "failed_checks": failed_checks,
                **({} if result.success else {"error": first_failure(result)}),
            }
        )
        return result.success

    def stop_if(received: list[str], result: dg.ExecuteInProcessResult | None = None) -> None:
        if result is not None and not received and was_interrupted(result):
            received.append("a signal")
        if received:
            done = ", ".join(f"{r['stage']} {r['partition']}" for r in runs) or "nothing"
            raise HaseError(f"interrupted by {received[0]}: stopped after {done}; no later partition was started")

    with stop_on_signal() as received:
        try:
            for batch in batches:
                if "analysis" in stages:
                    job = defs.resolve_job_def("analysis_job")
                    result = run_job(job, str(batch), instance, resources, profile.name)
                    stop_if(received, result)
                    if not record("analysis", str(batch), result):
                        continue
                if "benchmark" in stages:
                    for level in stress_levels or config.stress_levels:
                        key = dg.MultiPartitionKey({"stress_level": stress_level_key(level), "batch_size": str(batch)})
                        result = run_job(defs.resolve_job_def("benchmark_job"), key, instance, resources, profile.name)
                        stop_if(received, result)
                        record("benchmark", str(key), result)
            if "learning" in stages and all(r["status"] == "SUCCESS" for r in runs):
                result = run_job(defs.resolve_job_def("learning_job"), None, instance, resources, profile.name)
                stop_if(received, result)
                record("learning", "-", result)
        except KeyboardInterrupt:  # a signal outside a run (between runs, or while one starts)
            stop_if(received or ["SIGINT"])
    return {"profile": profile.name, "runs": runs}
