"""The dashboard in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`) driven by
Selenium, against uvicorn on 127.0.0.1. Nothing is downloaded: the driver path is explicit, so Selenium
Manager never runs. Set CK_DASHBOARD_SCREENSHOT=docs/dashboard.png to refresh docs/cli.md's screenshot."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.catalog import Catalog
from cachekeeper.dashboard.app import create_app
from cachekeeper.format.spec import EntrySpec
from tests.inspect.helpers import HOST, OTHER, THIRD, captured, manifest, publish, specs, write_config

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Catalog, list[EntrySpec]]]:
    import uvicorn

    all_specs = specs(write_config(tmp_path))
    tiny64, tiny128, small64, small128 = all_specs
    with Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        publish(catalog, None, manifest(tiny64, HOST, seconds=41.5, size=3_400_000),
                manifest(tiny128, HOST, seconds=63.0, size=5_100_000), manifest(small64, HOST, seconds=38.2),
                manifest(tiny64, OTHER), manifest(small64, OTHER), manifest(small128, OTHER),
                manifest(tiny64, THIRD), captured(HOST))
        catalog.enqueue([(HOST.id, small128.key, "{}"), (OTHER.id, tiny128.key, "{}")])
        catalog.claim("builder-a:4242", lease_s=900, fingerprint_id=HOST.id)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(create_app(catalog), log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            while not server.started:
                threading.Event().wait(0.02)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/", catalog, all_specs
        finally:
            server.should_exit = True
            thread.join(10)
            sock.close()


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are needed: run scripts/setup (apt: chromium chromium-driver)")
    monkeypatch.setenv("SE_OFFLINE", "true")          # belt and braces: Selenium Manager must not fetch
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def cells(driver: Any) -> dict[tuple[str, str], str]:
    from selenium.webdriver.common.by import By

    out = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "tr.mrow"):
        for td in row.find_elements(By.CSS_SELECTOR, "td[data-shape]"):
            out[(row.get_attribute("data-model"), td.get_attribute("data-shape"))] = td.get_attribute("data-status")
    return out


def submit(driver: Any, selector: str) -> None:
    """Click a form's button and wait until the next page replaced this one and finished loading.

    A mark left in this page's window tells the pages apart: the next page has none. (Waiting for the old
    `<html>` element to go stale raced the navigation: chromedriver 156 answers a node of the page being
    replaced with "Node with given id does not belong to the document", not a stale-element error.)"""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("window.ckOldPage = true")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    replaced = "return window.ckOldPage === undefined && document.readyState === 'complete'"
    # mid-navigation a script may find no document to run in: that is "not yet", not a failure
    WebDriverWait(driver, 10, ignored_exceptions=(WebDriverException,)).until(lambda d: d.execute_script(replaced))


def test_the_dashboard_in_chromium_matches_the_catalog_and_filters(
        served: tuple[str, Catalog, list[EntrySpec]], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url, catalog, all_specs = served
    browser.get(url + f"?fp={HOST.id}")
    assert browser.find_element(By.ID, "chosen-fp").text == HOST.id
    built = {r.name for r in catalog.find(fingerprint_id=HOST.id)}
    assert cells(browser) == {(s.model, s.shape.label()): "built" if s.key in built else "missing" for s in all_specs}
    assert "builder-a:4242" in browser.find_element(By.ID, "workers").text
    assert "captured" in browser.find_element(By.CSS_SELECTOR, "tr.captured-row").text
    shot = Path(os.environ.get("CK_DASHBOARD_SCREENSHOT") or tmp_path / "dashboard.png")
    browser.save_screenshot(str(tmp_path / "dashboard.png"))
    if shot != tmp_path / "dashboard.png":
        shutil.copyfile(tmp_path / "dashboard.png", shot)
    assert console_errors(browser) == []

    Select(browser.find_element(By.ID, "filter-model")).select_by_value("small")
    submit(browser, "#apply")
    assert "model=small" in browser.current_url
    assert set(cells(browser)) == {("small", "64x64x1"), ("small", "128x64x1")}

    Select(browser.find_element(By.ID, "filter-model")).select_by_value("")
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("missing")
    submit(browser, "#apply")
    assert cells(browser) == {("small", "128x64x1"): "missing"}
    assert console_errors(browser) == []

    browser.get(url)
    Select(browser.find_element(By.ID, "diff-a")).select_by_value(HOST.id)
    Select(browser.find_element(By.ID, "diff-b")).select_by_value(OTHER.id)
    submit(browser, "#diff-form button")
    assert "toolchain" in browser.find_element(By.ID, "fields").text
    assert console_errors(browser) == []

    browser.get(url + "?page=zero")            # the console check itself works: a 400 is logged as an error
    assert any("400" in message for message in console_errors(browser))
