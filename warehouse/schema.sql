-- Hase warehouse. Every table is written a partition at a time: the writer deletes the
-- partition's slice (batch_size, ep) and inserts the new rows in one transaction.

CREATE TABLE IF NOT EXISTS model_files (
    variant_id   VARCHAR NOT NULL,
    model_name   VARCHAR NOT NULL,
    input_size   INTEGER NOT NULL,
    batch_size   INTEGER NOT NULL,
    path         VARCHAR NOT NULL,
    size_bytes   BIGINT NOT NULL,
    opset        INTEGER NOT NULL,
    inputs_json  VARCHAR NOT NULL,
    outputs_json VARCHAR NOT NULL,
    run_id       VARCHAR,
    created_at   TIMESTAMP NOT NULL,
    held_out     BOOLEAN NOT NULL DEFAULT FALSE,
    family       VARCHAR,
    PRIMARY KEY (variant_id)
);
-- Warehouses written before the columns existed.
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS held_out BOOLEAN DEFAULT FALSE;
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS family VARCHAR;
-- Issue 15 C: the variant's precision (fp32, fp16, int8; rows from before are fp32), the fp32 variant
-- it was made from, and its top-1 agreement with that one on random inputs (NULL for fp32) over
-- top1_rows rows with a single top class.
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS base_variant_id VARCHAR;
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS top1_agreement DOUBLE;
ALTER TABLE model_files ADD COLUMN IF NOT EXISTS top1_rows INTEGER;

CREATE TABLE IF NOT EXISTS optimized_nodes (
    variant_id         VARCHAR NOT NULL,
    ep                 VARCHAR NOT NULL,
    batch_size         INTEGER NOT NULL,
    node_index         INTEGER NOT NULL,
    node_name          VARCHAR NOT NULL,
    op_type            VARCHAR NOT NULL,
    domain             VARCHAR NOT NULL,
    provider           VARCHAR NOT NULL,
    attributes_json    VARCHAR NOT NULL,
    input_shapes_json  VARCHAR NOT NULL,
    output_shapes_json VARCHAR NOT NULL,
    in_graph_us        DOUBLE,
    optimized_path     VARCHAR NOT NULL,
    run_id             VARCHAR,
    PRIMARY KEY (variant_id, ep, node_index)
);

CREATE TABLE IF NOT EXISTS kernels (
    variant_id        VARCHAR NOT NULL,
    ep                VARCHAR NOT NULL,
    batch_size        INTEGER NOT NULL,
    kernel_order      INTEGER NOT NULL,
    node_name         VARCHAR NOT NULL,
    family            VARCHAR NOT NULL,
    instance_id       VARCHAR NOT NULL,
    op_type           VARCHAR NOT NULL,
    domain            VARCHAR NOT NULL,
    absorbed_ops_json VARCHAR NOT NULL,
    attributes_json   VARCHAR NOT NULL,
    inputs_json       VARCHAR NOT NULL,
    outputs_json      VARCHAR NOT NULL,
    flops             BIGINT NOT NULL,
    input_bytes       BIGINT NOT NULL,
    output_bytes      BIGINT NOT NULL,
    weight_bytes      BIGINT NOT NULL,
    in_graph_us       DOUBLE,
    run_id            VARCHAR,
    PRIMARY KEY (variant_id, ep, kernel_order)
);
-- What the kernel computes in, from its inputs' element types (int8 where one is 8-bit, fp16 where one
-- is float16, else fp32): an fp16 model on the CPU EP runs mostly fp32 kernels between Casts.
ALTER TABLE kernels ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';

CREATE TABLE IF NOT EXISTS kernel_models (
    instance_id VARCHAR NOT NULL,
    ep          VARCHAR NOT NULL,
    batch_size  INTEGER NOT NULL,
    family      VARCHAR NOT NULL,
    path        VARCHAR NOT NULL,
    inputs_path VARCHAR NOT NULL,
    used_by     INTEGER NOT NULL,
    run_id      VARCHAR,
    PRIMARY KEY (instance_id, ep, batch_size)
);

CREATE TABLE IF NOT EXISTS dag_edges (
    variant_id  VARCHAR NOT NULL,
    ep          VARCHAR NOT NULL,
    batch_size  INTEGER NOT NULL,
    src_kernel  VARCHAR NOT NULL,
    dst_kernel  VARCHAR NOT NULL,
    tensor      VARCHAR NOT NULL,
    bytes       BIGINT NOT NULL,
    run_id      VARCHAR
);

CREATE TABLE IF NOT EXISTS latency_predictions (
    variant_id         VARCHAR NOT NULL,
    ep                 VARCHAR NOT NULL,
    batch_size         INTEGER NOT NULL,
    load_source        VARCHAR NOT NULL,
    load_util          DOUBLE NOT NULL,
    predicted_ms       DOUBLE NOT NULL,
    p90_ms             DOUBLE NOT NULL,
    critical_path_ms   DOUBLE NOT NULL,
    sequential_sum_ms  DOUBLE NOT NULL,
    kernels            INTEGER NOT NULL,
    fallback_kernels   INTEGER NOT NULL,
    warnings           VARCHAR NOT NULL,
    predicted_at       TIMESTAMP NOT NULL,
    run_id             VARCHAR
);

CREATE TABLE IF NOT EXISTS evaluation_cases (
    ep                    VARCHAR NOT NULL,
    setting               VARCHAR NOT NULL,
    variant_id            VARCHAR NOT NULL,
    architecture          VARCHAR NOT NULL,
    stress_level          DOUBLE NOT NULL,
    measured_mean_ms      DOUBLE NOT NULL,
    measured_p90_ms       DOUBLE NOT NULL,
    predicted_mean_ms     DOUBLE NOT NULL,
    predicted_p90_ms      DOUBLE NOT NULL,
    critical_path_ms      DOUBLE NOT NULL,
    kernel_sum_ms         DOUBLE NOT NULL,
    fallback_kernels      INTEGER NOT NULL,
    flops_proportional_ms DOUBLE,
    idle_kernel_sum_ms    DOUBLE,
    error_pct             DOUBLE NOT NULL,
    input_size            INTEGER,
    batch_size            INTEGER,
    run_id                VARCHAR,
    family                VARCHAR,
    size                  VARCHAR
);
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS input_size INTEGER;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS batch_size INTEGER;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS family VARCHAR;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS size VARCHAR;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS host_loop_ms DOUBLE;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS predicted_at_reading_ms DOUBLE;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS host_range_low_ms DOUBLE;
ALTER TABLE evaluation_cases ADD COLUMN IF NOT EXISTS host_range_high_ms DOUBLE;
ALTER TABLE latency_predictions ADD COLUMN IF NOT EXISTS precision VARCHAR DEFAULT 'fp32';
