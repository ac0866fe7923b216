"""DDL of the benchmark tables: fixed columns plus one nullable column per telemetry field,
over the timed window (``win_``) and the background just before (``bg_``)."""

from hase_dagster.core.metrics import ALL_FIELDS

_TIMING = """
    status VARCHAR NOT NULL, error VARCHAR, path VARCHAR NOT NULL,
    mean_ms DOUBLE, median_ms DOUBLE, p90_ms DOUBLE, std_ms DOUBLE, min_ms DOUBLE, rel_ci DOUBLE,
    n INTEGER, start_ns BIGINT, end_ns BIGINT, warmup INTEGER, intra_op_num_threads INTEGER,
    cudnn_conv_algo_search VARCHAR, clock VARCHAR,
    stress_level DOUBLE NOT NULL, batch_size INTEGER NOT NULL, device VARCHAR NOT NULL,
    ep VARCHAR NOT NULL, run_id VARCHAR"""

_METRICS = ",\n    ".join(f"{prefix}{name} DOUBLE" for prefix in ("win_", "bg_") for name in ALL_FIELDS)

BENCHMARK_SCHEMA_SQL = f"""
CREATE TABLE IF NOT EXISTS kernel_benchmarks (
    instance_id VARCHAR NOT NULL, family VARCHAR NOT NULL, op_type VARCHAR, domain VARCHAR,
    inputs_json VARCHAR, outputs_json VARCHAR, attributes_json VARCHAR,
    flops BIGINT, input_bytes BIGINT, output_bytes BIGINT, weight_bytes BIGINT,{_TIMING},
    {_METRICS}
);

CREATE TABLE IF NOT EXISTS model_benchmarks (
    variant_id VARCHAR NOT NULL, model_name VARCHAR NOT NULL, input_size INTEGER NOT NULL,{_TIMING},
    {_METRICS}
);

-- Tables made before the device clock existed: their rows were all timed by the host clock.
ALTER TABLE kernel_benchmarks ADD COLUMN IF NOT EXISTS clock VARCHAR DEFAULT 'host';
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS clock VARCHAR DEFAULT 'host';

-- The memory a model's session held (issue 15 B): peak_memory_mb by the EP's best source
-- (memory_source: nvml_process, cuda_mem_get_info or rss), each source's delta, and ORT's
-- allocator settings as JSON. NULL in rows measured before the columns existed.
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS peak_memory_mb DOUBLE;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS memory_source VARCHAR;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS rss_delta_mb DOUBLE;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS gpu_process_delta_mb DOUBLE;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS device_free_delta_mb DOUBLE;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS memory_arena VARCHAR;

-- Issue 15 C: a model's precision (its variant's) and a kernel's (from its inputs' element types);
-- rows measured before the column existed are fp32.
ALTER TABLE kernel_benchmarks ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';

-- Issue 11: how many sessions a model row's timings are the mean of (`hase merge-tables --pool-models`);
-- NULL in a row one session timed.
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS sessions INTEGER;

-- Issue 11: design-space probe rows of another machine's tables (a profile's reference_tables), their
-- times scaled to this machine's speed (speed_ratio), in the columns training reads (learn.reference_rows).
CREATE TABLE IF NOT EXISTS reference_kernel_rows AS
    SELECT *, NULL::VARCHAR AS architecture, NULL::VARCHAR AS sample_architectures,
           NULL::VARCHAR AS model_precisions, NULL::VARCHAR AS absorbed_ops_json, NULL::DOUBLE AS speed_ratio
    FROM kernel_benchmarks LIMIT 0;

-- Issue 11: the host core's speed over the timed window (Timing.host_loop_ms, a pure-Python loop's ms);
-- NULL in rows timed before it was read.
ALTER TABLE kernel_benchmarks ADD COLUMN IF NOT EXISTS host_loop_ms DOUBLE;
ALTER TABLE model_benchmarks ADD COLUMN IF NOT EXISTS host_loop_ms DOUBLE;
ALTER TABLE reference_kernel_rows ADD COLUMN IF NOT EXISTS host_loop_ms DOUBLE;
"""
