#!/usr/bin/env python3
"""The audit console (/ui/) in headless Chromium, against a real `quota serve`.

Usage: console.py BASE_URL ADMIN_TOKEN SCREENSHOT_DIR

Seeds a history over HTTP (defaults, a project `acme` with limits and a child `acme-dev`,
reserves committed, released and held, a denial, a correction, a forced limit, hostile client
strings), then drives the console as a person would: signs in, opens the projects, the project
(one chart per resource whose last in_use is the usage endpoint's), the audit trail (hostile text
shown as text, corrections marked, then denials only), a reservation's history (its events in
order), the project page at 390 px wide, and a wrong token (the 401 detail shown). Every check is
run; the failures are listed at the end and make the exit status 1. A PNG of each page is saved
in SCREENSHOT_DIR and its path printed.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE, TOKEN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
HOSTILE_ACTOR = "<img src=x onerror=alert(1)>"
HOSTILE_REQUEST_ID = '"><svg onload=alert(2)>'
HOSTILE_REASON = "recount <script>alert(3)</script>"
WRONG_TOKEN = "wrong-token-0123456789abcdef"

failures = []
passed = 0


def check(condition, message):
    """A check that is counted; a failing one is listed at the end."""
    global passed
    if condition:
        passed += 1
        print(f"ok: {message}")
    else:
        failures.append(message)
        print(f"FAILED: {message}", file=sys.stderr)
    return condition


def call(method, path, body=None, token=TOKEN, expect=None):
    """One API request; (status, JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    answer = json.loads(text) if text else None
    if expect is not None and status != expect:
        raise SystemExit(f"console.py: seeding {method} {path} answered {status}, not {expect}: {answer}")
    return status, answer


def seed():
    """The history the console shows; returns (last position, ids of note)."""
    positions = []

    def reserve(project, deltas, **extra):
        _, r = call("POST", f"/v1/projects/{project}/reservations", {"deltas": deltas, **extra}, expect=201)
        positions.append(r["position"])
        return r["reservation_id"]

    def act(project, rid, verb):
        _, r = call("POST", f"/v1/projects/{project}/reservations/{rid}/{verb}", expect=200)
        positions.append(r["position"])

    call("PUT", "/v1/defaults", {"limits": {"instances": 10, "cores": 20, "ram": 51200}}, expect=200)
    _, r = call("PUT", "/v1/projects/acme/limits", {"limits": {"instances": 5, "cores": 8}}, expect=200)
    positions.append(r["position"])
    _, r = call("PUT", "/v1/projects/acme-dev/parent", {"parent": "acme"}, expect=200)
    positions.append(r.get("position") or 0)
    hostile = reserve("acme", {"instances": 1, "cores": 2}, actor=HOSTILE_ACTOR, request_id=HOSTILE_REQUEST_ID)
    act("acme", hostile, "commit")
    rolled = reserve("acme", {"instances": 1, "ram": 1024}, user="alice", actor="ops@example")
    act("acme", rolled, "release")
    freed = reserve("acme", {"instances": 2, "cores": 2}, actor="ops@example")
    act("acme", freed, "commit")
    act("acme", freed, "release")
    reserve("acme", {"instances": 1, "cores": 1}, user="alice", actor="ops@example")
    child = reserve("acme-dev", {"instances": 1, "cores": 1}, actor="dev@example")
    act("acme-dev", child, "commit")
    status, denial = call("POST", "/v1/projects/acme/reservations", {"deltas": {"cores": 100}, "actor": "greedy@example"})
    if status != 403:
        raise SystemExit(f"console.py: the over-quota reserve answered {status}: {denial}")
    _, r = call("POST", "/v1/projects/acme/usage/corrections",
                {"in_use": {"ram": 2048}, "reason": HOSTILE_REASON}, expect=200)
    positions.append(r["position"])
    _, r = call("PUT", "/v1/projects/acme/limits", {"limits": {"cores": 3}, "force": True}, expect=200)
    positions.append(r["position"])
    return max(positions), {"freed": freed, "hostile": hostile}


def screenshot(driver, name):
    """A PNG of the whole page (the window made as tall as the page, up to 4,000 px)."""
    path = os.path.join(OUT, f"{name}.png")
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], min(max(height + 120, size["height"]), 4000))
    driver.save_screenshot(path)
    driver.set_window_size(size["width"], size["height"])
    print(f"screenshot: {os.path.abspath(path)}")


def mark_stale(driver):
    driver.execute_script("document.body.dataset.ready = 'stale'")


def wait_ready(driver, what, timeout=20):
    try:
        WebDriverWait(driver, timeout).until(
            lambda d: d.execute_script("return document.body.dataset.ready") == "true")
        return True
    except TimeoutException:
        return check(False, f"{what}: the page finished loading")


def go(driver, route, what):
    mark_stale(driver)
    driver.execute_script("location.hash = arguments[0]", route)
    return wait_ready(driver, what)


def click(driver, selector, what):
    mark_stale(driver)
    driver.find_element(By.CSS_SELECTOR, selector).click()
    return wait_ready(driver, what)


def texts(driver, selector):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def no_injection(driver, where):
    """No alert fired, and nothing the data carried became an element or a handler."""
    try:
        alert = driver.switch_to.alert
        check(False, f"{where}: no alert fired (one says {alert.text!r})")
        alert.dismiss()
    except NoAlertPresentException:
        check(True, f"{where}: no alert fired")
    injected = driver.execute_script(
        "return document.querySelectorAll('img, script:not([src]), [onerror], [onload]').length")
    check(injected == 0, f"{where}: no element injected from data ({injected} found)")


def csp_violations(driver):
    try:
        logs = driver.get_log("browser")
    except Exception:  # the log is a Chromium extra; no log, no check
        return []
    return [entry["message"] for entry in logs if "Content Security Policy" in entry["message"]]


def check_charts(driver, usage):
    """One chart per resource; each chart's last in_use is the usage endpoint's (retried)."""
    resources = sorted(usage["resources"])
    deadline = time.time() + 15
    while True:
        charts = driver.find_elements(By.CSS_SELECTOR, "svg[data-resource]")
        found = sorted(c.get_attribute("data-resource") for c in charts)
        last = {}
        for r in resources:
            cells = driver.find_elements(By.CSS_SELECTOR, f'figure[data-chart="{r}"] [data-last="in_use"]')
            last[r] = cells[0].text if cells else None
        want = {r: str(usage["resources"][r]["in_use"]) for r in resources}
        if (found == resources and last == want) or time.time() > deadline:
            break
        time.sleep(1)
        mark_stale(driver)
        driver.refresh()
        wait_ready(driver, "project page (reloaded for the charts)")
    errors = texts(driver, ".chart-error")
    check(found == resources, f"project: one chart per resource {resources} (found {found}; errors {errors})")
    for r in resources:
        series = driver.find_elements(By.CSS_SELECTOR, f'svg[data-resource="{r}"] [data-series]')
        names = sorted({s.get_attribute("data-series") for s in series})
        check(names == ["in_use", "limit", "reserved"], f"chart {r}: in_use, reserved and limit series ({names})")
        check(last[r] == want[r], f"chart {r}: last in_use {last[r]!r} is the usage endpoint's {want[r]!r}")


def main():
    os.makedirs(OUT, exist_ok=True)
    head, ids = seed()
    _, usage = call("GET", f"/v1/projects/acme/usage?min_position={head}", expect=200)
    _, _ = call("GET", f"/v1/projects/acme/audit?min_position={head}&limit=1", expect=200)
    _, refused = call("GET", "/v1/projects", token=WRONG_TOKEN)
    _, user_usage = call("GET", f"/v1/projects/acme/users/alice/usage?min_position={head}", expect=200)

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--lang=en-US"):
        options.add_argument(arg)
    options.binary_location = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        run(driver, usage, user_usage, ids, refused)
    finally:
        driver.quit()
    print(f"console: {passed} passed, {len(failures)} failed")
    if failures:
        print("console.py: failed checks:", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        sys.exit(1)


def run(driver, usage, user_usage, ids, refused):
    # Sign in.
    driver.get(BASE + "/ui")
    wait_ready(driver, "sign-in page")
    check(driver.current_url.startswith(BASE + "/ui/"), f"/ui redirects to /ui/ ({driver.current_url})")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    mark_stale(driver)
    driver.find_element(By.CSS_SELECTOR, "form.token-form button[type=submit]").click()
    wait_ready(driver, "projects page")

    # Projects: acme, and acme-dev under it.
    check(bool(driver.find_elements(By.CSS_SELECTOR, 'li[data-project="acme"]')), "projects: acme is listed")
    check(bool(driver.find_elements(By.CSS_SELECTOR, 'li[data-project="acme"] li[data-project="acme-dev"]')),
          "projects: acme-dev is shown under its parent acme")
    screenshot(driver, "projects")

    # The project: limits, usage, children, users, charts.
    click(driver, 'li[data-project="acme"] > a', "project page")
    check(driver.current_url.endswith("#/p/acme"), f"project: the route is #/p/acme ({driver.current_url})")
    rows = {r.get_attribute("data-resource") for r in driver.find_elements(By.CSS_SELECTOR, "table.usage tr[data-resource]")}
    check(rows == set(usage["resources"]), f"project: a usage row per resource ({sorted(rows)})")
    for r, u in usage["resources"].items():
        cell = driver.find_elements(By.CSS_SELECTOR, f'table.usage tr[data-resource="{r}"] [data-field="in_use"]')
        check(bool(cell) and cell[0].text == str(u["in_use"]), f"project: {r} in_use {u['in_use']} in the table")
    check(len(driver.find_elements(By.CSS_SELECTOR, "svg.bar")) == len(usage["resources"]),
          "project: a headroom bar per limited resource")
    check(bool(driver.find_elements(By.CSS_SELECTOR, '#family a[href="#/p/acme-dev"]')), "project: links to its child acme-dev")
    check(bool(driver.find_elements(By.CSS_SELECTOR, '#users a[href="#/p/acme/u/alice"]')), "project: names the user alice")
    check_charts(driver, usage)
    no_injection(driver, "project")
    screenshot(driver, "project")

    # A user, opened from the project: the user's usage as the API answers it, and the audit
    # filtered to the user.
    click(driver, '#users a[href="#/p/acme/u/alice"]', "user page")
    for r, u in user_usage["resources"].items():
        for field in ("in_use", "reserved"):
            cell = driver.find_elements(By.CSS_SELECTOR, f'table.usage tr[data-resource="{r}"] [data-field="{field}"]')
            check(bool(cell) and cell[0].text == str(u[field]), f"user: alice's {r} {field} {u[field]} in the table")
    no_injection(driver, "user")
    screenshot(driver, "user")
    click(driver, '.page-links a[href*="user=alice"]', "the user's audit")
    users = texts(driver, "table.audit tr[data-type] td:nth-child(6)")
    check(bool(users) and set(users) == {"alice"}, f"user: the audit shows alice's entries only ({users})")
    go(driver, "#/p/acme", "project page again")

    # The audit trail: hostile strings as text, a correction and a forced limit marked.
    click(driver, '.page-links a[href="#/p/acme/audit"]', "audit page")
    actors = texts(driver, 'table.audit td[data-field="actor"]')
    check(HOSTILE_ACTOR in actors, "audit: the hostile actor is shown as text")
    check(HOSTILE_REQUEST_ID in texts(driver, 'table.audit td[data-field="request_id"]'),
          "audit: the hostile request id is shown as text")
    check(HOSTILE_REASON in texts(driver, 'table.audit td[data-field="reason"]'), "audit: the hostile reason is shown as text")
    corrected = driver.find_elements(By.CSS_SELECTOR, 'tr[data-type="UsageCorrected"]')
    check(bool(corrected) and all("entry-corrected" in c.get_attribute("class") and "CORRECTED" in c.text for c in corrected),
          "audit: the correction is marked (class and label)")
    forced = driver.find_elements(By.CSS_SELECTOR, "tr.entry-forced")
    check(bool(forced) and "FORCED" in forced[0].text, "audit: the forced limit is marked")
    no_injection(driver, "audit")
    screenshot(driver, "audit")

    # A reservation's history, opened from the audit: its events in order.
    click(driver, f'a[data-reservation="{ids["freed"]}"]', "reservation page")
    types = [r.get_attribute("data-type") for r in driver.find_elements(By.CSS_SELECTOR, "table.audit tr[data-type]")]
    positions = [int(r.get_attribute("data-position")) for r in driver.find_elements(By.CSS_SELECTOR, "table.audit tr[data-type]")]
    check(types == ["ReservationRequested", "ReservationCommitted", "ReservationReleased"],
          f"reservation: requested, committed, released in order ({types})")
    check(positions == sorted(positions) and len(set(positions)) == len(positions), f"reservation: positions increase ({positions})")
    status = texts(driver, 'dd[data-field="status"]')
    check(status == ["released"], f"reservation: its status is released ({status})")
    screenshot(driver, "reservation")

    # Denials only, through the filter form.
    go(driver, "#/p/acme/audit", "audit page")
    Select(driver.find_element(By.ID, "type")).select_by_value("ReservationDenied")
    click(driver, "form.filters button[type=submit]", "audit page (denials)")
    check("type=ReservationDenied" in driver.current_url, f"audit: the filter is in the route ({driver.current_url})")
    denied = driver.find_elements(By.CSS_SELECTOR, "table.audit tr[data-type]")
    check(len(denied) >= 1 and all(r.get_attribute("data-type") == "ReservationDenied" for r in denied),
          f"audit: only denials shown ({[r.get_attribute('data-type') for r in denied]})")
    check(all("entry-denied" in r.get_attribute("class") and "DENIED" in r.text for r in denied),
          "audit: denials are marked (class and label)")
    screenshot(driver, "audit-denied")

    # The project page on a phone-sized screen: nothing wider than the screen.
    driver.set_window_size(390, 900)
    go(driver, "#/p/acme", "project page at 390 px")
    overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    check(overflow <= 0, f"project at 390 px: no horizontal scrolling of the page ({overflow} px too wide)")
    screenshot(driver, "project-390")
    driver.set_window_size(1280, 900)

    violations = csp_violations(driver)
    check(not violations, f"no Content-Security-Policy violation ({violations[:3]})")

    # Sign out, then a wrong token: the 401's detail in the alert region.
    driver.find_element(By.ID, "sign-out").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.ID, "token"))
    check(driver.execute_script("return sessionStorage.length") == 0, "sign out forgets the token")
    driver.find_element(By.ID, "token").send_keys(WRONG_TOKEN)
    mark_stale(driver)
    driver.find_element(By.CSS_SELECTOR, "form.token-form button[type=submit]").click()
    wait_ready(driver, "projects page with a wrong token")
    alert = driver.find_element(By.ID, "alert")
    check(alert.is_displayed() and alert.get_attribute("role") == "alert", "401: the alert region is shown")
    check(refused["detail"] in alert.text and "401" in alert.text,
          f"401: the alert shows the problem's detail {refused['detail']!r} ({alert.text!r})")
    screenshot(driver, "unauthorized")


if __name__ == "__main__":
    main()
