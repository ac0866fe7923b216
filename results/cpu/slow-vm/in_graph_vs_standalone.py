"""Per model of a `make run` warehouse: its idle whole-model time against the sum of its kernels timed alone, and the
kernels' in-graph times (ORT's profile in the catalog run) against the same; then each named model's convolutions
kernel by kernel. Where the model/sum ratio is not one number, a composition of kernel sums cannot fit every model.

    .venv/bin/python results/cpu/slow-vm/in_graph_vs_standalone.py .hase_data/hase.duckdb mobilenet_v2_i224_b4 ...
"""

from __future__ import annotations

import json
import sys

import duckdb

IDLE_KERNELS = """with kb as (select instance_id, batch_size, avg(mean_ms) ms from kernel_benchmarks
    where stress_level = 0 and status = 'ok' group by all)"""


def main() -> int:
    con = duckdb.connect(sys.argv[1], read_only=True)
    per_model = con.sql(f"""{IDLE_KERNELS},
        mb as (select variant_id, avg(mean_ms) mm from model_benchmarks where stress_level = 0 group by all)
        select k.variant_id, count(*) kernels, round(sum(kb.ms), 2) standalone_sum_ms,
            round(sum(k.in_graph_us) / 1000, 2) in_graph_sum_ms, round(any_value(mb.mm), 2) model_ms,
            round(any_value(mb.mm) / sum(kb.ms), 2) model_over_sum, round(sum(k.in_graph_us) / 1000 / sum(kb.ms), 2)
            in_graph_over_sum
        from kernels k join kb using (instance_id, batch_size) join mb using (variant_id)
        group by 1 order by 1""").df()
    print(per_model.to_markdown(index=False), "\n")
    for variant in sys.argv[2:]:
        convs = con.sql(
            f"""{IDLE_KERNELS}
            select k.kernel_order, k.family, k.attributes_json, k.inputs_json,
                round(k.in_graph_us / 1000, 3) in_graph_ms, round(kb.ms, 3) standalone_ms,
                round(k.in_graph_us / 1000 / kb.ms, 2) ratio
            from kernels k join kb using (instance_id, batch_size)
            where k.variant_id = ? and k.family like 'Conv%' order by in_graph_ms desc limit 8""",
            params=[variant],
        ).df()
        attributes = [json.loads(a) for a in convs.attributes_json]
        convs["layer"] = [
            f"group {a.get('group')} k {a.get('kernel_shape')} stride {a.get('strides')} x {json.loads(i)[0]['shape']}"
            for a, i in zip(attributes, convs.inputs_json)
        ]
        print(f"### {variant}\n")
        cols = ["kernel_order", "family", "layer", "in_graph_ms", "standalone_ms", "ratio"]
        print(convs[cols].to_markdown(index=False), "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
