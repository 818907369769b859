"""The YAML build matrix: parsing and validation with line-precise messages.

CONTRACT (other modules rely on these names):
    load_config(path) -> Config           raises ConfigError("FILE:LINE: message") on any bad input
    parse_config(text, source) -> Config
    Config.entries(backends=None, models=None) -> list[MatrixEntry]   (the expanded matrix, pure)
    Config.model_line(name), Config.require_model_paths(), Config.backend_options_for(backend)

Three parts: reader.py reads typed values out of YAML nodes, keeping each one's line; schema.py knows the
keys and builds a Config; model.py is the Config itself and the matrix expansion. All stay light (yaml +
stdlib): the hydrate boot path imports this package on hosts without torch. Reference: docs/config.md.
"""

from __future__ import annotations

from .model import Config, MatrixEntry, ModelMatrix
from .schema import (
    CONFIG_VERSION,
    DEFAULT_DTYPES,
    DEFAULT_MODES,
    DTYPES,
    INPUT_BUILDERS,
    LATENT_MULTIPLE,
    load_config,
    parse_config,
)

__all__ = [
    "CONFIG_VERSION", "DEFAULT_DTYPES", "DEFAULT_MODES", "DTYPES", "INPUT_BUILDERS", "LATENT_MULTIPLE",
    "Config", "MatrixEntry", "ModelMatrix", "load_config", "parse_config",
]
