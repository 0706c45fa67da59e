"""The web page in a real headless Chromium (selenium drives Debian's chromium/chromedriver;
nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from server_harness import password, server  # noqa: F401 - the fixture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
# scripts/services.sh installs them; under CI=true a missing browser fails instead of skipping
ON_CI = os.environ.get("CI") == "true"
if not ON_CI:
    webdriver = pytest.importorskip("selenium.webdriver")
else:
    from selenium import webdriver
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER) and not ON_CI,
                                reason="chromium is not installed (scripts/services.sh)")


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dpsql-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(driver, condition, timeout=20):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def _login(driver, server, user, pw):
    from selenium.webdriver.common.by import By

    driver.get(server.http + "/")
    driver.find_element(By.ID, "user").send_keys(user)
    driver.find_element(By.ID, "password").send_keys(pw)
    driver.find_element(By.ID, "login-button").click()


def _text(driver, element_id):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


def test_web_page_analyst_explain_run_history_and_refusal(server, browser):
    from selenium.webdriver.common.by import By

    _login(browser, server, "webby", password("webby"))
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    assert "visits" in _text(browser, "budget")
    sql = browser.find_element(By.ID, "sql")
    sql.clear()
    sql.send_keys("SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 4 GROUP BY day")
    browser.find_element(By.ID, "epsilon").send_keys("0.3")
    browser.find_element(By.ID, "explain-button").click()
    _wait(browser, lambda d: "fits your budget" in _text(d, "plan"))
    assert "COUNT(*)" in _text(browser, "plan")
    assert "visits 1 0 1" in _text(browser, "budget")  # explain spent nothing
    browser.find_element(By.ID, "run-button").click()
    _wait(browser, lambda d: "n_low" in _text(d, "result"))
    header = _text(browser, "result").splitlines()[0]
    assert header.split() == ["day", "n", "n_low", "n_high"]
    _wait(browser, lambda d: "ok" in _text(d, "history"))
    assert "region_id = 4" in _text(browser, "history")
    assert "0.3" in _text(browser, "budget")
    # beyond the budget: refused, nothing new in the result, the spend unchanged
    result_before = _text(browser, "result")
    eps = browser.find_element(By.ID, "epsilon")
    eps.clear()
    eps.send_keys("0.9")
    sql.clear()
    sql.send_keys("SELECT COUNT(*) AS n FROM visits WHERE region_id = 3")
    browser.find_element(By.ID, "run-button").click()
    _wait(browser, lambda d: "cannot cover" in _text(d, "message"))
    assert _text(browser, "result") == result_before
    _wait(browser, lambda d: "refused (budget_exhausted)" in _text(d, "history"))
    assert "0.3 0.7" in _text(browser, "budget")


def test_web_page_wrong_password_and_owner_view(server, browser):
    _login(browser, server, "webby", "not-the-password")
    _wait(browser, lambda d: "wrong user name or password" in _text(d, "message"))
    assert _text(browser, "budget") == ""
    _login(browser, server, "olga", password("olga"))
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    assert "visits" in _text(browser, "datasets")
    assert "webby" in _text(browser, "spend")
    assert "budget_exhausted" in _text(browser, "refusals")


def test_web_page_refuses_an_epsilon_it_cannot_read(server, browser):
    """"0,02" is NaN to JavaScript, which JSON sends as null: the page says so instead of
    letting the default ε be spent."""
    import httpx
    from selenium.webdriver.common.by import By

    _login(browser, server, "quinn", password("quinn"))
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    browser.find_element(By.ID, "epsilon").send_keys("0,02")
    for button in ("explain-button", "run-button"):
        browser.execute_script("document.getElementById('message').textContent = ''")
        browser.find_element(By.ID, button).click()
        _wait(browser, lambda d: "ε must be a number above 0" in _text(d, "message"))
    budget = httpx.get(server.http + "/api/v1/budget", auth=("quinn", password("quinn")))
    assert budget.json()["visits"]["spent"]["epsilon"] == 0
    assert _text(browser, "result") == ""
