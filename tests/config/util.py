"""Helpers shared by the config tests: parse from a string against a fixed, fake config directory."""

from __future__ import annotations

import textwrap

from cachekeeper.config import Config, parse_config

SOURCE = "cfg.yaml"
BASE_DIR = "/cfgdir"   # never touched: parsing is pure, only require_model_paths looks at the disk

# The example from docs/config.md: 2 models, 4 + 2 x 2 + 1 x 2 = 10 entries.
EXAMPLE = """\
version: 1
store: file://./.cachekeeper/store
catalog: sqlite:///./.cachekeeper/catalog.db
build: {timeout: 1800, workers: 2}
defaults:
  backends: [inductor]
  modes: [full]
  dtypes: [float32]
  shapes: {height: [64, 128], width: [64], batch: [1, 2]}
backend_options:
  inductor: {device: cpu}
  neuron: {logical_nc_config: 2}
  tpu: {}
models:
  - name: tiny-flux
    path: ./models/tiny-flux
  - name: flux-dev
    hub: black-forest-labs/FLUX.1-dev
    revision: 0123456
    tensor_parallel: 2
    guidance: true
    backends: [neuron, tpu]
    modes: {neuron: [eager, full], tpu: [defer_and_fuse]}
    dtypes: [bfloat16]
    shapes: [{height: 1024, width: 1024, batch: 1}, "768x1360x2"]
"""


def parse(text: str, source: str = SOURCE) -> Config:
    return parse_config(textwrap.dedent(text), source, base_dir=BASE_DIR)


def minimal(model_lines: str = "", top_lines: str = "") -> str:
    """A valid one-model config with extra lines appended to the model and to the top level."""
    return ("version: 1\n"
            "defaults:\n  backends: [inductor]\n  shapes: ['64x64']\n"
            + top_lines
            + "models:\n  - name: m\n    path: ./m\n"
            + model_lines)
