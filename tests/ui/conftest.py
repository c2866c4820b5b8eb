"""Browser tests of the management UI: Playwright (PyPI) driving Debian's
chromium, headless, against the real broker.

LAVINMQ_CHROMIUM      the browser (default /usr/bin/chromium)
LAVINMQ_UI_ARTEFACTS  where screenshots go (default $TMPDIR/lavinmq-ui-artefacts)
LAVINMQ_UI_BINARY     run the broker from this frozen executable instead of
                      `python -m lavinmq` (the packaging step does)

Without chromium or playwright the tests skip, saying why; in CI (CI=true)
they fail instead, since CI installs both."""
import base64
import json
import os
import re
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import BrokerProcess, ROOT

CHROMIUM = os.environ.get("LAVINMQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
ARTEFACTS = os.environ.get("LAVINMQ_UI_ARTEFACTS") or os.path.join(tempfile.gettempdir(), "lavinmq-ui-artefacts")
BINARY = os.environ.get("LAVINMQ_UI_BINARY")
TIMEOUT_MS = 15_000


def _missing():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (./dev test installs the test extra)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no browser at {CHROMIUM} (apt-get install chromium; .ci/run does)"
    return None


@pytest.fixture(scope="package")
def browser():
    problem = _missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"UI tests cannot run in CI: {problem}")
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright
    pw = sync_playwright().start()
    # launch() gives every run a fresh temporary profile (--user-data-dir)
    b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()
    pw.stop()


def start_broker(data_dir, *extra, main_settings=""):
    """A broker sampling rates every second, so that charts fill quickly
    (main_settings: more [main] lines)."""
    ini = os.path.join(os.path.dirname(str(data_dir)), "ui.ini")
    with open(ini, "w") as f:
        f.write("[main]\nstats_interval = 1000\n" + main_settings)
    command = [BINARY] if BINARY else None
    b = BrokerProcess(data_dir, extra_args=["-c", ini, *extra], command=command).start()
    deadline = time.monotonic() + 15
    while True:         # the HTTP listener may come up just after AMQP's
        try:
            socket.create_connection((b.host, b.http_port), timeout=0.5).close()
            return b
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no HTTP listener:\n{b.log_tail()}")
            time.sleep(0.05)


@pytest.fixture(scope="package")
def ui_broker(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("ui") / "data")
    yield b
    rc = b.stop()
    b.check_clean()
    assert rc == 0, b.log_tail()


def api(broker, method, path, body=None, user="guest", password="guest", headers=None):
    """(status, parsed JSON or text) from the management API."""
    data = json.dumps(body).encode() if body is not None else None
    h = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
         "Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(broker.http_url + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raw, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    if "json" in ctype and raw:
        return status, json.loads(raw)
    return status, raw.decode(errors="replace")


class UI:
    """One browser tab on the broker's UI that records every console
    error, page error, failed request and HTTP error answer; the test fails
    on any it did not expect (see allow())."""

    def __init__(self, context, broker, prefix):
        self.context = context
        self.broker = broker
        self.prefix = prefix
        self.page = context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.problems = []
        self.allowed = []
        p = self.page
        p.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        p.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        # A reload or goto cancels the old document's fetches (net::ERR_ABORTED; the UI itself
        # never aborts one): such a failure is judged in unexpected(), and counts only if the
        # page did not navigate after the request started.
        self.navigations = 0
        self.aborted = []
        p.on("framenavigated", lambda f: f == p.main_frame and setattr(self, "navigations", self.navigations + 1))
        p.on("request", lambda r: setattr(r, "_lavinmq_navigations", self.navigations))
        p.on("requestfailed", self._failed)
        p.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.request.method} {r.url}"))
        p.on("dialog", lambda d: d.accept())

    def allow(self, pattern):
        """Expect problems matching this regex (e.g. the 401 of a wrong password)."""
        self.allowed.append(re.compile(pattern))

    def _failed(self, r):
        text = f"request failed: {r.method} {r.url} {r.failure}"
        if r.failure == "net::ERR_ABORTED":
            self.aborted.append((getattr(r, "_lavinmq_navigations", self.navigations), text))
        else:
            self.problems.append(text)

    def unexpected(self):
        problems = self.problems + [text for seen, text in self.aborted if seen >= self.navigations]
        return [p for p in problems if not any(rx.search(p) for rx in self.allowed)]

    def open(self, hash_="#/"):
        self.page.goto(f"{self.broker.http_url}/{hash_}")

    def login(self, user="guest", password="guest"):
        self.open()
        self.page.fill("#username", user)
        self.page.fill("#password", password)
        self.page.click("#login-form button[type=submit]")
        self.page.wait_for_selector("#whoami")

    def go(self, hash_, ready):
        """Navigate inside the app and wait for a selector of the page."""
        self.page.evaluate("h => { window.location.hash = h }", hash_)
        self.page.wait_for_selector(ready)
        self.page.wait_for_load_state("networkidle")

    def shot(self, name):
        os.makedirs(ARTEFACTS, exist_ok=True)
        path = os.path.join(ARTEFACTS, f"{self.prefix}{name}.png")
        self.page.evaluate("window.scrollTo(0, 0)")     # sticky bars stay at the top of the picture
        self.page.screenshot(path=path, full_page=True)
        return path


@pytest.fixture
def ui_factory(browser, ui_broker):
    """Tabs in fresh browser contexts (separate storage: separate logins)."""
    made = []

    def make(broker=None, viewport=(1280, 900), refresh=1):
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=True)
        if refresh is not None:
            ctx.add_init_script(f"window.localStorage.setItem('lavinmq.refresh', '{refresh}')")
        tab = UI(ctx, broker or ui_broker, "frozen-" if BINARY else "")
        made.append(tab)
        return tab
    yield make
    problems = []
    for tab in made:
        problems += tab.unexpected()
        tab.context.close()
    assert not problems, "the UI had problems:\n" + "\n".join(problems)


@pytest.fixture
def ui(ui_factory):
    return ui_factory()


def perf_command():
    # the load generator is a client: the checkout's, even against a frozen broker
    return [sys.executable, "-m", "lavinmq.perf"]


__all__ = ["api", "start_broker", "perf_command", "ROOT"]
