"""Materialize the asset graph through the Dagster instance (DAGSTER_HOME), stage by stage, so
every run shows in the UI. This is what ``make run`` calls."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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
    (created with the repository's ``dagster-instance.yaml`` as its ``dagster.yaml``) when it is not set."""
    home = Path(os.environ.get("DAGSTER_HOME") or REPOSITORY / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists() and (REPOSITORY / "dagster-instance.yaml").exists():
        shutil.copy(REPOSITORY / "dagster-instance.yaml", home / "dagster.yaml")
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


# The code location's name in the UI: workspace.yaml's ``location_name`` (``dagster dev``) and the project
# name that ``dg dev`` uses; runs of ``hase materialize`` are attributed to it (see attributed_to_job).
CODE_LOCATION = "hase"


def remote_job_origin(job_name: str, repository_name: str) -> Any:
    """The origin the UI gives a run of ``job_name`` launched from the ``hase`` code location (the
    module ``hase_dagster.definitions`` loaded from this repository)."""
    # Private imports, on purpose: Dagster has no public API that runs a job in this process and records
    # the job's code location on the run. Its public launchers (`dagster job launch`, GraphQL) run the job
    # out of this process through a gRPC code server, which would lose the run's in-process resources
    # (the profile chosen on the command line) and the one-signal stop of `hase materialize`.
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    target = LoadableTargetOrigin(
        executable_path=sys.executable, module_name="hase_dagster.definitions", working_directory=str(REPOSITORY)
    )
    location = ManagedGrpcPythonEnvCodeLocationOrigin(loadable_target_origin=target, location_name=CODE_LOCATION)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, repository_name), job_name)


@contextmanager
def attributed_to_job(instance: dg.DagsterInstance, job_name: str, repository_name: str) -> Iterator[None]:
    """Runs created on ``instance`` inside the block carry the remote origin of ``job_name`` in the
    ``hase`` code location, so the UI lists them under the job (its runs page filters on the
    repository tag that origin sets) and on the timeline (which groups runs by origin).

    ``execute_in_process`` creates its run through ``instance.create_run_for_job`` without an origin;
    the block wraps that one method on this instance object and restores it on exit."""
    origin = remote_job_origin(job_name, repository_name)
    create_run_for_job = instance.create_run_for_job

    def create_with_origin(*args: Any, **kwargs: Any) -> Any:
        kwargs["remote_job_origin"] = kwargs.get("remote_job_origin") or origin
        return create_run_for_job(*args, **kwargs)

    instance.create_run_for_job = create_with_origin  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.create_run_for_job  # the class's method again


@dg.logger(
    config_schema={"log_level": dg.Field(str, is_required=False, default_value="INFO")},
    description="Dagster's events on stderr, one line each: a failure's stack trace stays in the run's log.",
)
def one_line_console(init_context: dg.InitLoggerContext) -> logging.Logger:
    """A console logger that prints the first line of each message (Dagster's own prints a failed step's
    whole stack trace, 100 lines that bury the one ``hase: error:`` line; the instance keeps them)."""
    logger = logging.Logger("hase.materialize", level=init_context.logger_config["log_level"].upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FirstLineFormatter("%(asctime)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    return logger


class FirstLineFormatter(logging.Formatter):
    """The record's first message line, without exception text."""

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().strip().splitlines() or [""]
        first = logging.LogRecord(
            record.name, record.levelno, record.pathname, record.lineno, lines[0], None, None, record.funcName
        )
        first.created, first.msecs = record.created, record.msecs
        return super().format(first) + (" (more in the run's log)" if len(lines) > 1 else "")


def run_job(
    job: dg.JobDefinition,
    partition_key: str | dg.MultiPartitionKey | None,
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    profile: str,
    repository_name: str | None = None,
) -> dg.ExecuteInProcessResult:
    """Execute ``job`` in this process, tagged so that :func:`reclaim_crashed_runs` can find it.

    Args:
        job: a job of the code location (or any job, with ``repository_name`` None).
        partition_key: the partition to run, if the job is partitioned.
        instance: the instance that records the run.
        resources: the resources the run gets.
        profile: the Hase profile, recorded as the ``hase/profile`` tag.
        repository_name: the code location's repository that holds ``job``; when given, the run
            carries that job's origin in the ``hase`` code location (see :func:`attributed_to_job`).

    Returns:
        The run's result (``raise_on_error`` is off: a failed run is a result, not an exception).
    """
    origin = attributed_to_job(instance, job.name, repository_name) if repository_name else nullcontext()
    with origin:
        return job.with_logger_defs({"console": one_line_console}).execute_in_process(
            partition_key=partition_key,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            tags={"hase/profile": profile, "hase/pid": str(os.getpid()), **LAUNCHER_TAGS},
            run_config=QUIET,
        )


def preflight(config: HaseConfig, profile: Profile, stress_levels: list[float] | None, data_root: Path) -> None:
    """Refuse, in a second and before any run, what would fail minutes into one: a CUDA profile where
    CUDA does not run, zoo models torchvision does not have, reference tables that are not there, stress
    levels that are not partitions, and a data directory that cannot be written.

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
    if profile.reference_tables is not None:
        from hase_dagster.learn.reference_rows import resolve_reference_tables

        resolve_reference_tables(profile.reference_tables)
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
    free = shutil.disk_usage(data_root).free
    if free < MIN_FREE_BYTES:
        raise HaseError(
            f"the disk holding the data directory {data_root} is full: {free / 2**20:.1f} MiB free, a run needs at "
            f"least {MIN_FREE_BYTES / 2**20:.0f} MiB"
        )
    warehouse_writable(data_root / "hase.duckdb")


# Less free space than this on the data directory's disk is a full disk: the smallest run exports models
# and writes tables of a few MiB, and DuckDB needs room for its write-ahead log.
MIN_FREE_BYTES = 64 * 2**20


def warehouse_writable(database: Path) -> None:
    """Open an existing warehouse for writing and close it again (a read-only file, filesystem or a lock
    held by another process fails here, in milliseconds, rather than minutes into a run).

    Raises:
        HaseError: naming the database and DuckDB's reason.
    """
    import duckdb

    if not database.exists():
        return
    try:
        duckdb.connect(str(database), read_only=False).close()
    except duckdb.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HaseError(f"the warehouse {database} cannot be opened for writing: {reason}") from exc


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


def disk_full_note(data_root: Path) -> str:
    """``"the disk holding ... is full (N MiB free): "`` when it is, else ``""``: a step that ran out of
    space often reports something else (ONNX Runtime says "Protobuf serialization failed")."""
    try:
        free = shutil.disk_usage(data_root).free
    except OSError:
        return ""
    return f"the disk holding {data_root} is full ({free / 2**20:.1f} MiB free): " if free < MIN_FREE_BYTES else ""


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
    stages: tuple[str, ...] = ("device", "analysis", "benchmark", "learning", "profiling"),
    stress_levels: list[float] | None = None,
) -> dict[str, Any]:
    """Materialize every asset for every partition of ``profile_name``, stage by stage; return what ran.

    The device stage profiles the profile's device (its partition of ``device_profile``) first. A
    stage runs for a batch size only when the stages before it succeeded for that batch size; the
    device profile gates nothing.
    """
    from hase_dagster.core.config import stress_level_key
    from hase_dagster.definitions import defs
    from resources.sets import hase_resources

    config = load_config()
    profile = select_profile(config, profile_name)
    data_root = data_dir()
    preflight(config, profile, stress_levels, data_root)
    instance = instance or project_instance()
    batches = batch_sizes or profile.batch_sizes
    add_batch_sizes(batches, instance)
    reclaim_crashed_runs(instance)
    resources = hase_resources(config.prometheus_url, profile.name)
    repository = defs.get_repository_def().name
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
                **({} if result.success else {"error": disk_full_note(data_root) + first_failure(result)}),
            }
        )
        return result.success

    def stop_if(received: list[str], result: dg.ExecuteInProcessResult | None = None) -> None:
        if result is not None and not received and was_interrupted(result):
            received.append("a signal")
        if received:
            if result is not None and not result.success:
                # Dagster ends a run it was interrupted in as a failure; it is a stop the user asked for.
                instance.report_run_canceled(result.dagster_run, f"hase materialize was interrupted by {received[0]}")
            done = ", ".join(f"{r['stage']} {r['partition']}" for r in runs) or "nothing"
            raise HaseError(f"interrupted by {received[0]}: stopped after {done}; no later partition was started")

    with stop_on_signal() as received:
        try:
            if "device" in stages:
                job = defs.resolve_job_def("device_profile_job")
                result = run_job(job, profile.device, instance, resources, profile.name, repository)
                stop_if(received, result)
                record("device", profile.device, result)
            for batch in batches:
                if "analysis" in stages:
                    job = defs.resolve_job_def("analysis_job")
                    result = run_job(job, str(batch), instance, resources, profile.name, repository)
                    stop_if(received, result)
                    if not record("analysis", str(batch), result):
                        continue
                if "benchmark" in stages:
                    for level in stress_levels or config.stress_levels:
                        key = dg.MultiPartitionKey({"stress_level": stress_level_key(level), "batch_size": str(batch)})
                        job = defs.resolve_job_def("benchmark_job")
                        result = run_job(job, key, instance, resources, profile.name, repository)
                        stop_if(received, result)
                        record("benchmark", str(key), result)
            if "learning" in stages and all(r["status"] == "SUCCESS" for r in runs if r["stage"] != "device"):
                job = defs.resolve_job_def("learning_job")
                result = run_job(job, None, instance, resources, profile.name, repository)
                stop_if(received, result)
                record("learning", "-", result)
            if "profiling" in stages:
                # Operator profiling (issue 14 A) gates nothing: every configuration of the device's grid,
                # then the comparison across them.
                from hase_dagster.analysis.op_models import grid

                for config in grid(profile.device):
                    result = run_job(
                        defs.resolve_job_def("profiling_job"), config.key, instance, resources, profile.name, repository
                    )
                    stop_if(received, result)
                    record("profiling", config.key, result)
                job = defs.resolve_job_def("profiling_comparison_job")
                result = run_job(job, None, instance, resources, profile.name, repository)
                stop_if(received, result)
                record("profiling", "comparison", result)
        except KeyboardInterrupt:  # a signal outside a run (between runs, or while one starts)
            stop_if(received or ["SIGINT"])
    return {"profile": profile.name, "runs": runs}
