"""How the interop suite gets each official client: a missing toolchain or download skips, a broken driver fails."""

from __future__ import annotations

import sys

import pytest

from tests.interop import conftest

pytestmark = pytest.mark.interop


@pytest.fixture
def no_toolchains(monkeypatch):
    monkeypatch.setattr(conftest.shutil, "which", lambda name: None)
    monkeypatch.setattr(conftest, "GO_FALLBACKS", ())


@pytest.mark.parametrize("language,tools", [("java", "Maven"), ("go", "Go toolchain"), ("node", "npm")])
def test_a_client_without_its_toolchain_is_skipped_with_the_reason(no_toolchains, language, tools):
    driver = conftest._BUILDERS[language]()
    assert driver.skip_reason and tools in driver.skip_reason
    with pytest.raises(pytest.skip.Exception, match=tools):
        driver.run("127.0.0.1:1", "produce", "--topic", "t")


def test_a_build_that_cannot_download_its_dependencies_is_a_skip_reason(tmp_path):
    offline = [sys.executable, "-c",
               "import sys; print('go: github.com/x: dial tcp: lookup proxy.golang.org: no such host'); sys.exit(1)"]
    reason = conftest._build(offline, tmp_path, "the Go client driver")
    assert reason.startswith("the Go client driver: dependencies could not be downloaded") and "dial tcp" in reason


def test_a_driver_that_does_not_compile_fails_the_suite(tmp_path):
    broken = [sys.executable, "-c", "import sys; print('main.go:3: syntax error'); sys.exit(1)"]
    with pytest.raises(pytest.fail.Exception, match="syntax error"):
        conftest._build(broken, tmp_path, "the Go client driver")


def test_an_offline_trial_that_fails_is_only_a_reason_to_try_online(tmp_path):
    broken = [sys.executable, "-c", "import sys; print('[ERROR] cannot access central in offline mode'); sys.exit(1)"]
    assert "offline mode" in conftest._build(broken, tmp_path, "the Java client driver", trial=True)
