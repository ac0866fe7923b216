"""Materialize operator_profile for the given partition keys (then, with --compare, the comparison)
through the project's Dagster instance (DAGSTER_HOME), as `hase materialize --stage profiling` does for
the whole grid; a key whose summary.json exists is skipped, so a step that was cut off resumes.

    python results/profiling/profile_grid.py --profile gpu KEY [KEY ...] [--compare]
    python results/profiling/profile_grid.py --profile gpu --list     # the profile's grid, one key a line

Exit status 0 when every run succeeded, 2 otherwise (one `hase: error:` line per failed run).
"""

from __future__ import annotations

import argparse
import sys

from hase_dagster.analysis.op_models import grid
from hase_dagster.core.config import data_dir, load_config
from hase_dagster.core.profiles import select_profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", help="partition keys (default: none; see --list)")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--compare", action="store_true", help="then materialize profiling_comparison")
    parser.add_argument("--list", action="store_true", help="print the profile's grid and exit")
    args = parser.parse_args(argv)
    config = load_config()
    profile = select_profile(config, args.profile)
    if args.list:
        print("\n".join(c.key for c in grid(profile.device)))
        return 0
    from assets.profiling import profiling_dir
    from hase_dagster.definitions import defs
    from hase_dagster.orchestration.materialize import project_instance, reclaim_crashed_runs, run_job
    from resources.sets import hase_resources

    instance = project_instance()
    reclaim_crashed_runs(instance)
    resources = hase_resources(config.prometheus_url, profile.name)
    repository = defs.get_repository_def().name
    root = profiling_dir(data_dir(), profile.device)
    failed = 0
    jobs = [("profiling_job", key) for key in args.keys if not (root / key / "summary.json").exists()]
    jobs += [("profiling_comparison_job", None)] if args.compare else []
    for job_name, key in jobs:
        result = run_job(defs.resolve_job_def(job_name), key, instance, resources, profile.name, repository)
        status = "SUCCESS" if result.success else "FAILURE"
        print(f"{job_name} {key or '-'}: {status} run {result.run_id}", flush=True)
        if not result.success:
            failed += 1
            print(f"hase: error: {job_name} {key or '-'} failed (run {result.run_id})", file=sys.stderr)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
