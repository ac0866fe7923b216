"""The device profile: what the device can do (peak GEMM throughput per precision, memory
bandwidth, overheads, GPU time slices), one partition per device. The figures are the roofline
bounds the regressor can use (``hase_dagster.measure.device_profile.load_roofline``)."""

import dagster as dg
import pandas as pd

from assets.analysis import POOL
from hase_dagster.measure.device_profile import DEVICES, device_profile_dir, profile_device, save_profile
from resources.hase import HaseResource

device_partitions = dg.StaticPartitionsDefinition(list(DEVICES))


@dg.asset(
    partitions_def=device_partitions,
    group_name="device",
    pool=POOL,
    kinds={"python", "triton"},
    check_specs=[dg.AssetCheckSpec("peaks_measured", asset="device_profile")],
    description="Peak GEMM TFLOPS per precision, memory bandwidth, launch and ORT overheads (and on a GPU: "
    "Hase's Triton GEMM against cuBLAS and the time slices a co-tenant gets), quick settings.",
)
def device_profile(context: dg.AssetExecutionContext, hase: HaseResource) -> dg.MaterializeResult:
    device = context.partition_key
    profile = hase.profile()
    if device != profile.device:
        # A profile measures its own device: the cpu profile runs only the CPU counterpart.
        raise dg.Failure(
            f"partition {device!r} is measured by a profile on {device}; this run's profile {profile.name!r} "
            f"measures {profile.device}: materialize partition {profile.device!r}"
        )
    document = profile_device(device, quick=True, log=context.log.info)
    report = save_profile(document, device_profile_dir(hase.paths().root, device))
    peaks = document["peaks"]
    errors = document.get("errors") or {}
    table = pd.DataFrame([{"precision": k, "TFLOPS": round(v, 4)} for k, v in sorted(peaks["tflops"].items())])
    return dg.MaterializeResult(
        metadata={
            "device_name": document.get("device_name", ""),
            "peak_tflops": dg.MetadataValue.md(table.to_markdown(index=False) if len(table) else "_none_"),
            "bandwidth_gbps": float(peaks["bandwidth_gbps"] or 0.0),
            "seconds": float(document["seconds"]),
            "report": dg.MetadataValue.path(str(report)),
            "failed_steps": dg.MetadataValue.json(errors),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="peaks_measured",
                passed=bool(peaks["tflops"]) and bool(peaks["bandwidth_gbps"]) and not errors,
                metadata={"failed_steps": dg.MetadataValue.json(errors)},
            )
        ],
    )


device_assets = [device_profile]

device_profile_job = dg.define_asset_job(
    "device_profile_job",
    # With the convolution study (assets.conv_implementations, by group: that module imports this one).
    selection=dg.AssetSelection.assets(device_profile) | dg.AssetSelection.groups("convolution"),
    partitions_def=device_partitions,
    description="Measure the device of the profile (one partition per device) and compare convolution "
    "implementations on it.",
)
