"""Debian's headless chromium through selenium, for the tests of pages opened from disk.

Where chromium and chromedriver are not installed, ``chromium()`` says why, and the tests
report that they did not run (``.ci/run`` installs both when it runs as root).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def browser_paths() -> tuple[str, str] | str:
    """(chromium, chromedriver), or why they cannot be used."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser") if
                    shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = [name for name, path in (("chromium", browser), ("chromedriver", driver))
                   if path is None]
        return (f"{' and '.join(missing)} not installed (apt-get install chromium "
                "chromium-driver; .ci/run does it when run as root)")
    return browser, driver


@contextmanager
def chromium() -> Iterator[object]:
    """A headless chromium that keeps the console's log; skips the test without one."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    paths = browser_paths()
    if isinstance(paths, str):
        pytest.skip(f"browser tests not run: {paths}")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--window-size=1300,1800", "--allow-file-access-from-files"):
        options.add_argument(argument)
    options.binary_location = paths[0]
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(paths[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()
