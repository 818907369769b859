"""`plugin_site`: the plugins of this directory installed as distributions in a temp site dir (distributions.py);
`plugged`: fresh processes that see them. The test process itself never imports them."""

from __future__ import annotations

from pathlib import Path

import pytest

from .distributions import HERE, PLUGINS, Plugged, install


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    for plugin in PLUGINS:
        install(HERE / plugin, site)
    return site


@pytest.fixture
def plugged(plugin_site: Path, tmp_path: Path) -> Plugged:
    return Plugged(plugin_site, tmp_path)
