"""Errors that name the problem, raised for bad input anywhere in Hase."""


class HaseError(Exception):
    """Base class: a problem the user can act on, with a message that names it."""


class ConfigError(HaseError):
    """The config file or a profile in it is invalid."""


class ModelLoadError(HaseError):
    """A file is not a valid ONNX model, or ONNX Runtime rejects it."""


class UnknownModelError(HaseError):
    """A zoo model name that neither torchvision nor Hase knows."""


class ExecutionProviderUnavailableError(HaseError):
    """The requested execution provider does not truly run on this machine (e.g. no GPU)."""


class PrometheusUnavailableError(HaseError):
    """Prometheus does not answer (not running, wrong URL, timeout) or answers with an error."""


class MissingMetricsError(HaseError):
    """Prometheus answers but has no series for some of the metrics asked for."""
