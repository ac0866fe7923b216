"""Where Hase keeps its files: one data directory with the DuckDB file and artifact folders."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The data directory when HASE_DATA_DIR is not set.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / ".hase_data"
# Predictor bundles shipped in the repository (``hase predict --predictor h100`` finds them by name).
SHIPPED_BUNDLES = Path(__file__).resolve().parents[2] / "results" / "bundles"


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file of its own in the same folder, then rename it over
    ``path``: a reader sees the old or the new file whole, and writers racing on one path (analysis workers
    mapping two models of one structure) each rename their own file instead of one renaming the other's.

    Returns:
        ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=target.parent, prefix=f".{target.name}.", suffix=".partial", delete=False
    ) as f:
        f.write(text)
    Path(f.name).replace(target)
    return target


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The folder that holds the DuckDB file and every artifact (HASE_DATA_DIR by default)."""
    return Path(override or os.environ.get("HASE_DATA_DIR") or DEFAULT_DATA_DIR).resolve()


@dataclass(frozen=True)
class DataPaths:
    """Layout of a data directory. Folders per execution provider keep CPU and GPU apart."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / "hase.duckdb"

    @property
    def models(self) -> Path:
        return self.root / "models"

    def optimized(self, ep: str) -> Path:
        return self.root / "optimized" / ep

    def catalogs(self, ep: str) -> Path:
        return self.root / "catalogs" / ep

    def fusion_maps(self, ep: str) -> Path:
        return self.root / "fusion_maps" / ep

    def kernels(self, ep: str) -> Path:
        return self.root / "kernels" / ep

    def analysis_cache(self, ep: str) -> Path:
        """Kernel lists of analysed models (``learn.sweep.AnalysisCache``), for predictions on ORT's kernels."""
        return self.root / "analysis_cache" / ep

    def dags(self, ep: str) -> Path:
        return self.root / "dags" / ep

    def predictor(self, ep: str) -> Path:
        """The trained predictor's folder (JSON + model files, see ``learn.training.Predictor``)."""
        return self.root / "regressors" / ep / "predictor"

    @property
    def bundles(self) -> Path:
        """Predictor bundles imported with ``hase predictor import`` (one folder per bundle name)."""
        return self.root / "bundles"

    def reports(self, ep: str) -> Path:
        return self.root / "reports" / ep
