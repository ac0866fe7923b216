"""Learning: features, kernel regressors, whole-model composition, prediction of any ONNX file,
evaluation and reports. Builds on ``core``, ``analysis``, ``measure`` and the ``warehouse``."""
