"""`plugin_site`: the plugins of this directory installed as distributions in a temp site dir (distributions.py);
`plugged`: fresh processes that see them; `dir2_site`: the dir2 store plugin installed by pip. The test process
itself never imports them."""

from __future__ import annotations

from pathlib import Path

import pytest

from .distributions import HERE, PLUGINS, Plugged, install, pip_install


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    for plugin in PLUGINS:
        install(HERE / plugin, site)
    return site


@pytest.fixture
def plugged(plugin_site: Path, tmp_path: Path) -> Plugged:
    return Plugged(plugin_site, tmp_path)


@pytest.fixture(scope="session")
def dir2_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/plugins/dir2 built and installed by pip (`pip install --target`) into a site dir of its own."""
    site = tmp_path_factory.mktemp("dir2-site")
    pip_install(HERE / "dir2", site, tmp_path_factory.mktemp("dir2-build"))
    return site
