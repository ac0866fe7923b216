"""Analysis: export zoo models, read the graph ORT optimizes, name the fused kernels it runs,
extract each kernel as its own ONNX model, and build the model's kernel DAG. Builds on ``core``."""
