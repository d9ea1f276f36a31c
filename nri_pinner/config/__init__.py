"""Settings: the TOML config file parsed into validated, immutable settings."""

from .settings import (
    CONFIG_PATH,
    ConfigError,
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
    "ReconcileSettings",
    "Settings",
    "StateSettings",
    "TopologyManagerSettings",
    "from_mapping",
    "load",
    "load_file",
]
