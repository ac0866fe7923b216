"""The serving plan: batch sizes, queue delays and priorities for models served on one device, planned
by simulation from Hase's predictions at every stress level of the config (issue 16)."""

from pathlib import Path

import dagster as dg

from assets.learning import latency_regressor
from hase_dagster.core.config import load_config
from hase_dagster.core.serving_spec import load_plan_spec
from resources.hase import HaseResource

GROUP = "serving"
DEFAULT_PLAN = Path(__file__).resolve().parents[1] / "results" / "serving" / "plan-cpu.yaml"


class ServingPlanConfig(dg.Config):
    """Which plan YAML to plan (models with SLOs, priorities and rates); empty: the CPU example."""

    plan_yaml: str = ""


@dg.asset(
    deps=[latency_regressor],
    group_name=GROUP,
    kinds={"simpy", "triton"},
    check_specs=[dg.AssetCheckSpec("every_slo_attainable_at_idle", asset="serving_plan")],
    description="Per model a batch size, max queue delay and whether its SLO holds, at every stress level, "
    "from a SimPy simulation driven by the trained predictor; a Triton config.pbtxt per model and level.",
)
def serving_plan(
    context: dg.AssetExecutionContext, config: ServingPlanConfig, hase: HaseResource
) -> dg.MaterializeResult:
    from hase_dagster.analysis.serving_models import ensure_models
    from hase_dagster.learn.serving_plan import cotenant_share, exec_time_for, plan, plan_markdown, write_plan

    profile = hase.profile()
    paths = hase.paths()
    spec = load_plan_spec(config.plan_yaml or DEFAULT_PLAN)
    # Exported models belong in the data directory, not beside the YAML; the profile picks the device.
    models = [
        m.model_copy(update={"path": paths.root / "serving_models" / f"{m.export}.onnx"}) if m.export else m
        for m in spec.models
    ]
    spec = spec.model_copy(update={"models": models, "device": profile.execution_provider})
    ensure_models(spec)
    levels = load_config(hase.config_path or None).stress_levels
    url = load_config(hase.config_path or None).prometheus_url
    loads = [f"level={level:g}" for level in levels]
    exec_time = exec_time_for(spec, paths.root, url, loads)
    sections, attainable_idle, folder = [], True, paths.root / "serving_plan"
    for level, load in zip(levels, loads, strict=True):
        at_level = spec.model_copy(update={"load": load})
        result = plan(at_level, exec_time, cotenant_share(at_level, url))
        write_plan(result, folder / f"level-{level:g}")
        sections.append(f"### stress {level:g}\n\n{plan_markdown(result)}")
        if level == 0:
            attainable_idle = all(m.attainable for m in result.models)
        context.log.info(f"stress {level:g}: planned in {result.seconds:.1f} s")
    return dg.MaterializeResult(
        metadata={
            "plan_yaml": str(config.plan_yaml or DEFAULT_PLAN),
            "path": dg.MetadataValue.path(str(folder)),
            "plans": dg.MetadataValue.md("\n".join(sections)),
        },
        check_results=[dg.AssetCheckResult(check_name="every_slo_attainable_at_idle", passed=attainable_idle)],
    )


serving_assets = [serving_plan]
