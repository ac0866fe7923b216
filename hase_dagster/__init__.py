"""Hase: predict ONNX model latency on a shared accelerator from the kernels ONNX Runtime runs."""

__version__ = "0.1.0"
