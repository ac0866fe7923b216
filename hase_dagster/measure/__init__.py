"""Measurement: time kernels and models (host and device clocks, CUPTI), load the device with a
stressor, sample telemetry and read Prometheus. Builds on ``core`` and ``analysis``."""
