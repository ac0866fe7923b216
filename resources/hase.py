"""The Hase settings resource: which config, profile and data directory a run uses."""

import dagster as dg

from hase_dagster.core.config import Profile, data_dir, load_config
from hase_dagster.core.paths import DataPaths
from hase_dagster.core.profiles import select_profile
from warehouse.store import Warehouse


class HaseResource(dg.ConfigurableResource):
    """Config file, profile and data directory. Empty fields fall back to HASE_CONFIG,
    HASE_PROFILE and HASE_DATA_DIR, then to the repository's ``hase.yaml``, the config's default
    profile (``auto``: ``gpu`` where CUDA truly runs, else ``cpu``) and ``.hase_data``."""

    config_path: str = ""
    profile_name: str = ""
    data_directory: str = ""

    def profile(self) -> Profile:
        return select_profile(load_config(self.config_path or None), self.profile_name or None)

    def paths(self) -> DataPaths:
        return DataPaths(data_dir(self.data_directory or None))

    def warehouse(self) -> Warehouse:
        return Warehouse(self.paths().database)
