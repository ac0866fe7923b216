import os
from pathlib import Path

import pytest
import yaml

from hase_dagster.core.config import load_config
from hase_dagster.core.errors import ConfigError, HaseError
from hase_dagster.core.profiles import select_profile


def _write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_repository_config_has_cpu_and_gpu_profiles() -> None:
    config = load_config()
    assert config.profiles["cpu"].device == "cpu"
    gpu = config.profiles["gpu"]
    assert gpu.device == "cuda"
    assert gpu.input_sizes == [224, 320, 512] and gpu.batch_sizes == [16, 64, 128]


def test_auto_profile_is_cpu_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HASE_PROFILE", raising=False)
    monkeypatch.setattr("hase_dagster.core.ort_runtime.cuda_is_usable", lambda: False)
    assert select_profile(load_config()).name == "cpu"


def test_unknown_key_is_named(tmp_path: Path, test_config: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["batch_size"] = [1]  # typo of batch_sizes
    with pytest.raises(ConfigError, match=r"unknown key 'profiles.tiny.batch_size'"):
        load_config(_write(tmp_path, document))


def test_bad_value_is_named(tmp_path: Path, test_config: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["batch_sizes"] = [0]
    with pytest.raises(ConfigError, match=r"profiles.tiny.batch_sizes.0"):
        load_config(_write(tmp_path, document))


def test_bad_device_and_missing_profile(tmp_path: Path, test_config: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["device"] = "tpu"
    with pytest.raises(ConfigError, match="device"):
        load_config(_write(tmp_path, document))
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        select_profile(load_config(test_config), "nope")


def test_device_clock_needs_a_cuda_profile(tmp_path: Path, test_config: Path) -> None:
    document = yaml.safe_load(test_config.read_text())
    document["profiles"]["tiny"]["kernel_timing"] = {"clock": "device"}
    with pytest.raises(ConfigError, match="clock 'device' times CUDA runs only"):
        load_config(_write(tmp_path, document))
    document["profiles"]["tiny"]["kernel_timing"] = {"clock": "wall"}
    with pytest.raises(ConfigError, match="kernel_timing.clock"):
        load_config(_write(tmp_path, document))


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.yaml")


def test_stress_level_partitions_need_no_config_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "HASE_STRESS_LEVELS": "0.0,0.25", "HASE_CONFIG": str(tmp_path / "no-such.yaml")}
    script = "from assets.partitions import stress_level_partitions as p; print(','.join(p.get_partition_keys()))"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.00,0.25"


def test_stress_levels_from_the_environment_are_validated() -> None:
    from assets.partitions import stress_level_keys

    assert stress_level_keys({"HASE_STRESS_LEVELS": "1, 0.5"}) == ["1.00", "0.50"]
    with pytest.raises(HaseError, match=r"\[0, 1\]"):
        stress_level_keys({"HASE_STRESS_LEVELS": "1.5"})
    with pytest.raises(HaseError, match="comma-separated numbers"):
        stress_level_keys({"HASE_STRESS_LEVELS": "idle"})
