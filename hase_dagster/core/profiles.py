"""Choosing the profile to run: by name, by HASE_PROFILE, or ``auto`` by whether CUDA truly runs."""

from __future__ import annotations

import os

from hase_dagster.core.config import HaseConfig, Profile
from hase_dagster.core.errors import ConfigError
from hase_dagster.core.ort_runtime import cuda_is_usable


def select_profile(config: HaseConfig, name: str | None = None) -> Profile:
    """Return the profile ``name`` (or HASE_PROFILE, or the config default).

    ``auto`` resolves to ``gpu`` when the CUDA execution provider truly runs here, else ``cpu``.
    """
    wanted = name or os.environ.get("HASE_PROFILE") or config.default_profile
    if wanted == "auto":
        wanted = "gpu" if cuda_is_usable() and "gpu" in config.profiles else "cpu"
    if wanted not in config.profiles:
        raise ConfigError(f"unknown profile {wanted!r}; the config has {sorted(config.profiles)}")
    return config.profiles[wanted]
