"""The built website, opened page by page in a real browser.

Serves ``_build/html`` on 127.0.0.1 and drives Debian's Chromium with Playwright. For
every page it fails on: a console error or uncaught exception, a request that leaves
127.0.0.1 (the site must work offline and privately), math that MathJax did not render,
an image that did not load, and a kernel-free explorable whose figure does not change
when a slider moves, whose frames exceed the 2 MB budget, or whose frames have fewer than
twice the pixels of the width the page shows them at.

``make test`` builds the site and installs Chromium first. Set ``ISOLAB_SCREENSHOTS=dir``
to save a full-page screenshot of every page.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_build" / "html"
MAX_EXPLORABLE_BYTES = 2_000_000
#: How long one condition may take. Generous: a loaded two-core machine renders a chapter
#: page (MathJax typesetting every formula) many times slower than an idle one.
PAGE_TIMEOUT_MS = 180_000
LOCAL_HOSTS = {"127.0.0.1"}
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def site_pages() -> list[str]:
    if not SITE.is_dir():
        return []
    pages = []
    for path in sorted(SITE.rglob("*.html")):
        rel = path.relative_to(SITE).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/")):
            continue
        pages.append(rel)
    return pages


def chromium_path() -> str:
    candidate = os.environ.get("ISOLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(candidate).exists():
        pytest.fail(
            "Chromium was not found. Install Debian's package (as root: apt-get install -y chromium; "
            "`make test` does this for you) or point ISOLAB_CHROMIUM at a Chromium binary.",
            pytrace=False,
        )
    return candidate


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def base_url():
    if not (SITE / "index.html").exists():
        pytest.fail(f"no built site at {SITE}: run `make book` first", pytrace=False)
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
                                             timeout=PAGE_TIMEOUT_MS)
        yield browser
        browser.close()


def test_site_has_pages():
    pages = site_pages()
    assert "index.html" in pages, f"no built site at {SITE}: run `make book` first"
    assert any(p.startswith("book/ch") for p in pages), "the site has no chapter pages"


REFRESH = re.compile(r'<meta\s+http-equiv="refresh"\s+content="\d+;\s*url=([^"]+)"', re.IGNORECASE)


def redirect_target(url: str) -> str | None:
    """Where the built page at ``url`` redirects with a meta refresh, if it does."""
    path = SITE / urlparse(url).path.lstrip("/")
    match = REFRESH.search(path.read_text(errors="replace")[:2000]) if path.is_file() else None
    return match.group(1) if match else None


class PageVisit:
    """Open one page, recording console errors and blocked requests."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.set_default_timeout(PAGE_TIMEOUT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.route("**/*", self._route)
        # Concrete conditions, not "network idle" (which a busy machine can miss for
        # reasons that have nothing to do with the page): the load event here, then
        # MathJax's startup promise and each explorable's first frame (wait_for_page).
        self.page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        target = redirect_target(url)
        if target:  # a meta-refresh page (the site's root): wait for the page it leads to
            self.page.wait_for_url(urljoin(url, target), wait_until="load", timeout=PAGE_TIMEOUT_MS)

    def _route(self, route) -> None:
        url = route.request.url
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob", "about") or parsed.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def close(self) -> None:
        self.context.close()


def wait_for_page(page) -> None:
    """MathJax has typeset the page and every explorable shows its first frame."""
    has_mathjax = page.evaluate("() => typeof window.MathJax !== 'undefined'")
    if has_mathjax:
        page.wait_for_function("() => window.MathJax.startup && window.MathJax.startup.promise", timeout=PAGE_TIMEOUT_MS)
        page.evaluate("() => window.MathJax.startup.promise")
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('div.isolab-explorable')).every(root => {
               const img = root.querySelector('img.isolab-frame');
               return root.dataset.ready === 'true' && img && img.complete && img.naturalWidth > 0; })""",
        timeout=PAGE_TIMEOUT_MS,
    )


@pytest.mark.parametrize("page_path", site_pages() or ["<no built site>"])
def test_page(browser, base_url, page_path):
    assert page_path != "<no built site>", f"no built site at {SITE}: run `make book` first"
    visit = PageVisit(browser, base_url + page_path)
    page = visit.page
    try:
        wait_for_page(page)

        math_total = page.locator(".math").count()
        if math_total:
            rendered = page.evaluate(
                "() => Array.from(document.querySelectorAll('.math')).filter(e => e.querySelector('mjx-container')).length"
            )
            assert rendered == math_total, f"{math_total - rendered} of {math_total} math elements were not rendered by MathJax"
            assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"

        broken = page.evaluate(
            "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"
        )
        assert not broken, f"images that did not load: {broken}"

        for index in range(page.locator("div.isolab-explorable").count()):
            check_explorable(page.locator("div.isolab-explorable").nth(index))

        if os.environ.get("ISOLAB_SCREENSHOTS"):
            out = Path(os.environ["ISOLAB_SCREENSHOTS"]) / (page_path.replace("/", "__") + ".png")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)

        assert not visit.outside, f"requests left 127.0.0.1: {visit.outside}"
        assert not visit.errors, f"console errors: {visit.errors}"
    finally:
        visit.close()


def check_explorable(root) -> None:
    """Every slider of a kernel-free explorable changes the figure, and back."""
    assert root.get_attribute("data-ready") == "true", "explorable script did not initialise"
    payload = root.locator("script.isolab-explorable-data").inner_text()
    assert len(payload) < MAX_EXPLORABLE_BYTES, f"explorable frames take {len(payload)} bytes"
    image = root.locator("img.isolab-frame")
    natural, shown = image.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert shown > 0 and natural >= 2 * shown - 1, (
        f"a frame {natural} px wide is shown {shown:.0f} px wide: draw it at twice the width the page shows "
        "(high-density screens)")
    sliders = root.locator("input[type=range]")
    assert sliders.count() >= 1
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        start_src = image.get_attribute("src")
        start_value = slider.input_value()
        key = "Home" if start_value == slider.get_attribute("max") else "End"
        slider.focus()
        slider.press(key)
        moved_value = slider.input_value()
        assert moved_value != start_value, f"slider {slider.get_attribute('data-name')} did not move"
        assert image.get_attribute("src") != start_src, (
            f"moving slider {slider.get_attribute('data-name')} did not change the figure"
        )
        label = slider.locator("xpath=following-sibling::output").inner_text()
        assert label, "the slider's value label is empty"
        # put it back: the figure must return to the frame it started from
        slider.evaluate(
            "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }",
            start_value,
        )
        assert image.get_attribute("src") == start_src, "returning a slider did not restore the figure"
