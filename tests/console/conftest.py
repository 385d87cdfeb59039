"""The console is tested as an operator uses it: `txmq console` as its own process, real brokers
(a lone one, and broker groups around a real etcd), pages read in headless Debian chromium
driven by Selenium through Debian's chromedriver (`make chromium` installs both)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

TXMQ = str(Path(sys.executable).parent / "txmq")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
REFRESH_S = 0.5  # the console's refresh interval in these tests

pytest.importorskip("starlette", reason="the console's extra is not installed (pip install -e '.[console]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra has it)")


class Console:
    """A `txmq console` process."""

    def __init__(self, brokers: str, *, refresh_s: float = REFRESH_S, timeout_s: float = 10.0) -> None:
        self.proc = subprocess.Popen([TXMQ, "console", "--broker", brokers, "--listen", "127.0.0.1:0",
                                      "--refresh", str(refresh_s), "--timeout", str(timeout_s)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = self.proc.stdout.readline()
        found = re.search(r"(http://\S+?)/ ", line)
        if not found:
            self.proc.kill()
            raise RuntimeError(f"txmq console did not start: {line}{self.proc.stdout.read()}")
        self.url = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def browser():
    """Headless chromium (Debian's), one for the session; each test opens its pages anew."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed: `make chromium` "
                    "(apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    """Open a console URL in the browser and wait for its content."""
    browser.delete_all_cookies()

    def open_(url: str):
        browser.get(url)
        return browser
    return open_


def wait_for(condition: Callable[[], object], timeout_s: float = 15.0, what: str = "condition"):
    """Poll `condition` until it returns something truthy (a page refreshes in place)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # an element swapped out by htmx mid-read: read again
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f": {last}" if last else ""))


def cli_json(*args: str) -> object:
    result = subprocess.run([TXMQ, *args, "--json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
