"""Signing in to the console with the brokers' HMAC accounts: the brokers decide who is admin."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import Console, wait_for
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import Message, NativeClient

ACCOUNTS = """
[[accounts]]
access_key = "ops"
secret_key = "ops-secret"
publish = ["*"]
subscribe = ["*"]
admin = true

[[accounts]]
access_key = "reader"
secret_key = "reader-secret"
subscribe = ["*"]
publish = []
admin = false
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-auth")
    (root / "auth.toml").write_text(ACCOUNTS)
    with BrokerProcess(root / "data", flush="async", extra_args=["--auth-file", str(root / "auth.toml")]) as proc:
        with NativeClient(proc.endpoint, access_key="ops", secret_key="ops-secret") as c:
            c.create_topic("guarded", 1)
            c.send([Message("guarded", b"g") for _ in range(3)])
            c.commit_offsets("guards", {"guarded": {0: 0}})
        yield proc


@pytest.fixture(scope="module")
def console(broker):
    c = Console(broker.endpoint)
    yield c
    c.stop()


def sign_in(b, url: str, access_key: str, secret_key: str) -> None:
    b.get(url + "/login")
    b.find_element(By.ID, "access_key").send_keys(access_key)
    b.find_element(By.ID, "secret_key").send_keys(secret_key)
    b.find_element(By.ID, "sign-in").click()


def test_brokers_with_auth_send_an_anonymous_visitor_to_sign_in(page, console):
    b = page(console.url + "/cluster")
    assert b.current_url.endswith("/login")


def test_a_wrong_secret_is_refused_at_sign_in(page, console):
    b = page(console.url + "/login")
    sign_in(b, console.url, "ops", "not-the-secret")
    assert "refused" in b.find_element(By.ID, "login-error").text


def test_an_admin_account_sees_the_cluster_and_may_reset_offsets(page, console, broker):
    b = page(console.url + "/login")
    sign_in(b, console.url, "ops", "ops-secret")
    wait_for(lambda: b.find_elements(By.CSS_SELECTOR, "tr[data-replica]"), what="the cluster page")
    assert "admin" in b.find_element(By.CSS_SELECTOR, "header .who").text
    b.get(console.url + "/groups/guards")
    assert b.find_elements(By.ID, "reset-form")


def test_an_account_that_is_not_admin_is_refused_the_admin_pages_and_actions(page, console, broker):
    b = page(console.url + "/login")
    sign_in(b, console.url, "reader", "reader-secret")
    b.get(console.url + "/groups/guards")
    assert b.find_elements(By.ID, "reset-refused") and not b.find_elements(By.ID, "reset-form")
    status = b.execute_script("""
        return fetch('/groups/guards/reset', {method: 'POST', credentials: 'same-origin',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'topic=guarded&to=latest'})
          .then(function (r) { return r.status; });""")
    assert status == 403
    b.get(console.url + "/transactions")
    assert "Forbidden" in b.find_element(By.ID, "error").text
    with NativeClient(broker.endpoint, access_key="ops", secret_key="ops-secret") as c:
        assert c.group_lag("guards", ["guarded"])["guarded"][0].committed == 0, "the refused reset changed offsets"
