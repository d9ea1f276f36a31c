"""Settings: the TOML config file parsed into validated, immutable settings."""

from .problems import ConfigError, Problem
from .settings import (
    CONFIG_PATH,
    CPUManagerSettings,
    InspectSettings,
    LogSettings,
    MetricsSettings,
    NRISettings,
    ReconcileSettings,
    Settings,
    StateSettings,
    TopologyManagerSettings,
    from_mapping,
    load,
    load_file,
)

__all__ = [
    "CONFIG_PATH",
    "CPUManagerSettings",
    "ConfigError",
    "InspectSettings",
    "LogSettings",
    "MetricsSettings",
    "NRISettings",
    "Problem",
    "ReconcileSettings",
    "Settings",
    "StateSettings",
    "TopologyManagerSettings",
    "from_mapping",
    "load",
    "load_file",
]
