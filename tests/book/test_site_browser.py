"""The built website, opened page by page in a real browser.

Serves ``_build/html`` on 127.0.0.1 and drives Debian's Chromium with Playwright, at a
1280-px window. Each page is opened once (:func:`page_report` measures everything in
that visit); the tests below, each parametrized by page so that one chapter's failure
does not hide another's, fail on:

* ``test_page``: a console error or uncaught exception, a request that leaves 127.0.0.1
  (the site must work offline and privately), math that MathJax did not render, an image
  that did not load, and a kernel-free explorable whose figure does not change when a
  slider or toggle moves (by pointer and by keyboard), whose frames exceed the 2 MB
  budget, or whose frames have fewer than twice the pixels of the width the page shows;
* ``test_nothing_scrolls_sideways``: an element of the main column that scrolls sideways
  (a code block, an output, an equation) or spills past the column's edge;
* ``test_explorable_text_is_legible``: explorable text under 12 CSS px at the width the
  page shows the frame (its smallest text in points, from the frame's data attributes,
  at the frame's resolution, times its shown width over its natural width);
* ``test_figures_keep_their_aspect``: an image (a figure, an explorable's frame) whose
  shown aspect differs from its natural aspect by more than 2 %, at 1280 px and on a phone;
* ``test_every_image_has_alt_text`` (chapters): an image without alt text, or whose alt
  text is only its file name;
* ``test_figures_are_numbered_in_order`` (chapters): a figure (a cell showing an image or
  an explorable) not followed by its caption, ``Figure N.k.`` in bold, numbered
  1, 2, ... in order of appearance with N the chapter's number.

On a phone (390 x 844 CSS px, device scale 2, mobile emulation; :func:`phone_report`):

* ``test_phone_nothing_wider_than_the_screen``: the page scrolls sideways, or a shown
  element reaches past the screen's right edge (the part not clipped by a scrolling or
  clipping box: a code block that scrolls inside itself is fine, a table or an image that
  widens the page is not);
* ``test_phone_explorable_text_is_legible``: explorable text under 9 CSS px (the
  smallest over the frame's strips, for an explorable cut into panels).

The phone tests, the aspect test and the legibility tests are held page by page, and a
chapter still listed in ``tests/book/book_standard.py`` (``NOT_YET_CONVERTED``) is an
expected failure there.

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
from book_standard import marks

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
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


#: A phone: the CSS viewport, the device pixel ratio (the page's layout is measured at
#: this width; frames are drawn for a 2x screen).
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True,
         "has_touch": True}
DESKTOP = {"viewport": {"width": 1280, "height": 900}}


class PageVisit:
    """Open one page, recording console errors and blocked requests."""

    def __init__(self, browser, url: str, device: dict = DESKTOP):
        self.context = browser.new_context(**device)
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


#: Smallest explorable text, CSS px at the shown width (BOOK_STYLE): at 1280 px, on a phone.
MIN_TEXT_PX = 12
MIN_PHONE_TEXT_PX = 9
#: How far a figure's shown aspect may depart from its natural aspect.
MAX_ASPECT_CHANGE = 0.02
CHAPTER = re.compile(r"book/ch(\d\d)_")


def chapter_number(page_path: str) -> int | None:
    match = CHAPTER.match(page_path)
    return int(match.group(1)) if match else None


PAGES = site_pages() or ["<no built site>"]
CHAPTER_PAGES = [p for p in PAGES if chapter_number(p) is not None] or ["<no built site>"]
#: Every page, an expected failure while its chapter is not yet converted (book_standard).
HELD_PAGES = [pytest.param(p, marks=marks(p)) for p in PAGES]

#: Measured in any page: images whose shown aspect is not their natural one, and each
#: explorable's smallest text in CSS px (font points at the frame's resolution, scaled by
#: the shown over the natural width; the smallest over the frames of its strips).
FIGURES = r"""() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const shown = el => el.getClientRects().length > 0 && !el.closest('details:not([open]) > :not(summary)');
  const distorted = [];
  for (const img of article.querySelectorAll('img')) {
    if (!shown(img) || !(img.naturalWidth > 0 && img.naturalHeight > 0)) continue;
    const box = img.getBoundingClientRect();
    if (!(box.width > 0 && box.height > 0)) continue;
    const change = (box.width / box.height) / (img.naturalWidth / img.naturalHeight) - 1;
    if (Math.abs(change) > %(tol)s) {
      distorted.push(`${(img.getAttribute('alt') || img.getAttribute('src') || '').slice(0, 60)}: `
        + `shown ${box.width.toFixed(0)} x ${box.height.toFixed(0)} px, natural `
        + `${img.naturalWidth} x ${img.naturalHeight} (aspect ${change > 0 ? '+' : ''}${(100 * change).toFixed(1)} %%)`);
    }
  }
  const explorables = Array.from(article.querySelectorAll('div.isolab-explorable')).map(root => {
    const frames = Array.from(root.querySelectorAll('img.isolab-frame')).filter(shown);
    const dpi = parseFloat(root.dataset.frameDpi), font = parseFloat(root.dataset.minFontPt);
    const sizes = frames.map(img => font / 72 * dpi * img.getBoundingClientRect().width / img.naturalWidth);
    return {width_in: parseFloat(root.dataset.figureWidthIn), font_pt: font, dpi: dpi, frames: frames.length,
            text_px: sizes.length ? Math.min(...sizes) : null,
            shown: frames.length ? frames[0].getBoundingClientRect().width : 0,
            natural: frames.length ? frames[0].naturalWidth : 0,
            controls: Array.from(root.querySelectorAll('[data-name]')).map(c => c.dataset.name).join(', ')};
  });
  return {distorted, explorables};
}""" % {"tol": MAX_ASPECT_CHANGE}

#: Measured on a phone: whether the page scrolls sideways, and the shown elements whose
#: visible part (clipped by any ancestor that scrolls or clips) reaches past the screen.
WIDER_THAN_SCREEN = r"""() => {
  const width = document.documentElement.clientWidth;
  const shown = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden'
    && !el.closest('details:not([open]) > :not(summary)');
  const name = el => {
    const text = (el.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 50);
    const section = el.closest('section[id]');
    return `${el.tagName.toLowerCase()}${el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : ''}`
      + ` in §${section ? section.id : '?'}: "${text}"`;
  };
  const visibleRight = el => {
    const box = el.getBoundingClientRect();
    let left = box.left, right = box.right;
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const style = getComputedStyle(a);
      if (style.overflowX !== 'visible') {
        const clip = a.getBoundingClientRect();
        left = Math.max(left, clip.left);
        right = Math.min(right, clip.right);
      }
      if (style.position === 'fixed') break;
    }
    return right > left ? right : -Infinity;
  };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (!shown(el) || wide.some(w => w.el.contains(el))) continue;
    const right = visibleRight(el);
    if (right > width + 1) wide.push({el, text: `${name(el)} reaches ${Math.round(right - width)} px past the screen`});
  }
  return {scroll_width: document.documentElement.scrollWidth, width, wide: wide.map(w => w.text)};
}"""

#: Measured in the page before any control is touched (layout, images, figures).
LAYOUT = r"""() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const box = article.getBoundingClientRect();
  const shown = el => el.getClientRects().length > 0 && !el.closest('details:not([open]) > :not(summary)');
  const name = el => {
    const text = (el.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 60);
    const section = el.closest('section[id]');
    return `${el.tagName.toLowerCase()}${el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : ''}`
      + ` in §${section ? section.id : '?'}: "${text}"`;
  };
  const overflow = [];
  for (const el of article.querySelectorAll('*')) {
    if (!shown(el)) continue;
    const style = getComputedStyle(el);
    if (['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
      overflow.push(`${name(el)} scrolls sideways (${el.scrollWidth} px of content in ${el.clientWidth} px)`);
    }
  }
  for (const el of article.querySelectorAll('pre, img, table, mjx-container, div.isolab-explorable, div.cell, p')) {
    if (!shown(el)) continue;
    const right = el.getBoundingClientRect().right;
    if (right > box.right + 1) overflow.push(`${name(el)} spills ${Math.round(right - box.right)} px past the column`);
  }
  const images = Array.from(article.querySelectorAll('img:not([aria-hidden="true"])')).map(img => ({
    alt: (img.getAttribute('alt') || '').trim(), src: (img.getAttribute('src') || '').slice(0, 60),
    explorable: !!img.closest('div.isolab-explorable')}));
  // A figure: a cell whose output shows an image or an explorable; its caption is the
  // element right after the cell.
  const figures = [];
  for (const cell of article.querySelectorAll('div.cell')) {
    const output = cell.querySelector('div.cell_output');
    if (!output || !output.querySelector('img, div.isolab-explorable')) continue;
    if (!shown(output.querySelector('img, div.isolab-explorable'))) continue;
    const next = cell.nextElementSibling;
    const strong = next && next.tagName === 'P' && next.firstElementChild && next.firstElementChild.tagName === 'STRONG'
      && next.textContent.trim().startsWith(next.firstElementChild.textContent.trim()) ? next.firstElementChild.textContent.trim() : null;
    const section = cell.closest('section[id]');
    figures.push({label: strong, next: next ? next.textContent.replace(/\s+/g, ' ').trim().slice(0, 50) : '(nothing)',
                  section: section ? section.id : '?'});
  }
  return {overflow, images, figures};
}"""

_REPORTS: dict[str, dict] = {}


def page_report(browser, base_url, page_path) -> dict:
    """Everything the tests check on one page, measured in one visit (cached per page)."""
    assert page_path != "<no built site>", f"no built site at {SITE}: run `make book` first"
    if page_path not in _REPORTS:
        report: dict = {}
        visit = PageVisit(browser, base_url + page_path)
        page = visit.page
        try:
            wait_for_page(page)
            report["math_total"] = page.locator(".math").count()
            report["math_rendered"] = page.evaluate(
                "() => Array.from(document.querySelectorAll('.math')).filter(e => e.querySelector('mjx-container')).length")
            report["math_errors"] = page.locator("mjx-merror").count()
            report["broken"] = page.evaluate(
                "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))")
            report.update(page.evaluate(LAYOUT))
            report["shapes"] = page.evaluate(FIGURES)
            if os.environ.get("ISOLAB_SCREENSHOTS"):
                out = Path(os.environ["ISOLAB_SCREENSHOTS"]) / (page_path.replace("/", "__") + ".png")
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
            report["interaction"] = []
            for index in range(page.locator("div.isolab-explorable").count()):
                try:
                    check_explorable(page.locator("div.isolab-explorable").nth(index))
                except AssertionError as failure:
                    report["interaction"].append(f"explorable {index + 1}: {failure}")
            report["outside"], report["errors"] = list(visit.outside), list(visit.errors)
        except Exception as error:  # noqa: BLE001 - every test of this page reports it
            report["visit_error"] = f"{type(error).__name__}: {error}"
        finally:
            visit.close()
        _REPORTS[page_path] = report
    report = _REPORTS[page_path]
    assert "visit_error" not in report, f"{page_path}: the page could not be measured: {report['visit_error']}"
    return report


_PHONE_REPORTS: dict[str, dict] = {}


def phone_report(browser, base_url, page_path) -> dict:
    """The page on a phone (:data:`PHONE`), measured in one visit (cached per page): how
    wide it is, its figures' aspects and its explorables' smallest text."""
    assert page_path != "<no built site>", f"no built site at {SITE}: run `make book` first"
    if page_path not in _PHONE_REPORTS:
        report: dict = {}
        visit = PageVisit(browser, base_url + page_path, PHONE)
        try:
            wait_for_page(visit.page)
            report.update(visit.page.evaluate(WIDER_THAN_SCREEN))
            report["shapes"] = visit.page.evaluate(FIGURES)
            if os.environ.get("ISOLAB_SCREENSHOTS"):
                out = Path(os.environ["ISOLAB_SCREENSHOTS"]) / (page_path.replace("/", "__") + ".phone.png")
                out.parent.mkdir(parents=True, exist_ok=True)
                visit.page.screenshot(path=str(out), full_page=True)
        except Exception as error:  # noqa: BLE001 - every test of this page reports it
            report["visit_error"] = f"{type(error).__name__}: {error}"
        finally:
            visit.close()
        _PHONE_REPORTS[page_path] = report
    report = _PHONE_REPORTS[page_path]
    assert "visit_error" not in report, f"{page_path}: the page could not be measured on a phone: {report['visit_error']}"
    return report


@pytest.mark.parametrize("page_path", PAGES)
def test_page(browser, base_url, page_path):
    report = page_report(browser, base_url, page_path)
    if report["math_total"]:
        missing = report["math_total"] - report["math_rendered"]
        assert not missing, f"{missing} of {report['math_total']} math elements were not rendered by MathJax"
        assert report["math_errors"] == 0, "MathJax reported a TeX error"
    assert not report["broken"], f"images that did not load: {report['broken']}"
    assert not report["interaction"], "\n".join(report["interaction"])
    assert not report["outside"], f"requests left 127.0.0.1: {report['outside']}"
    assert not report["errors"], f"console errors: {report['errors']}"


@pytest.mark.parametrize("page_path", PAGES)
def test_nothing_scrolls_sideways(browser, base_url, page_path):
    """At 1280 px no block of the main column scrolls sideways or spills past it (visible
    code is at most 88 characters a line, which the column fits)."""
    overflow = page_report(browser, base_url, page_path)["overflow"]
    assert not overflow, f"{page_path}: {len(overflow)} element(s) too wide for the column:\n  " + "\n  ".join(overflow[:25])


def small_text(explorables: list[dict], minimum: float) -> list[str]:
    """The explorables whose smallest text lands under ``minimum`` CSS px (or that do not
    state their frames' resolution and smallest text)."""
    small = []
    for i, e in enumerate(explorables, 1):
        if not (e["dpi"] > 0 and e["font_pt"] > 0 and e["text_px"]):
            small.append(f"explorable {i} ({e['controls']}) does not state its frames' resolution and smallest text "
                         "(data-frame-dpi, data-min-font-pt), or shows no frame")
        elif e["text_px"] < minimum:
            small.append(f"explorable {i} ({e['controls']}): its smallest text, {e['font_pt']:g} pt in frames drawn at "
                         f"{e['dpi']:g} dpi and shown at {e['shown']:.0f} of their {e['natural']} px, lands at "
                         f"{e['text_px']:.1f} CSS px")
    return small


@pytest.mark.parametrize("page_path", PAGES)
def test_explorable_text_is_legible(browser, base_url, page_path):
    small = small_text(page_report(browser, base_url, page_path)["shapes"]["explorables"], MIN_TEXT_PX)
    assert not small, f"{page_path}: explorable text under {MIN_TEXT_PX} CSS px at 1280 px:\n  " + "\n  ".join(small)


@pytest.mark.parametrize("page_path", HELD_PAGES)
def test_figures_keep_their_aspect(browser, base_url, page_path):
    """Every image is shown at its natural aspect (within 2 %), at 1280 px and on a phone:
    a fixed pixel height with a width that shrinks to the column squashes a figure."""
    wrong = [f"at 1280 px: {d}" for d in page_report(browser, base_url, page_path)["shapes"]["distorted"]]
    wrong += [f"on a phone: {d}" for d in phone_report(browser, base_url, page_path)["shapes"]["distorted"]]
    assert not wrong, f"{page_path}: {len(wrong)} figure(s) distorted:\n  " + "\n  ".join(wrong[:20])


@pytest.mark.parametrize("page_path", HELD_PAGES)
def test_phone_nothing_wider_than_the_screen(browser, base_url, page_path):
    report = phone_report(browser, base_url, page_path)
    problems = list(report["wide"])
    if report["scroll_width"] > report["width"] + 1:
        problems.insert(0, f"the page scrolls sideways ({report['scroll_width']} px of page on a "
                           f"{report['width']}-px screen)")
    assert not problems, f"{page_path} on a phone:\n  " + "\n  ".join(problems[:25])


@pytest.mark.parametrize("page_path", HELD_PAGES)
def test_phone_explorable_text_is_legible(browser, base_url, page_path):
    small = small_text(phone_report(browser, base_url, page_path)["shapes"]["explorables"], MIN_PHONE_TEXT_PX)
    assert not small, (f"{page_path}: explorable text under {MIN_PHONE_TEXT_PX} CSS px on a phone (declare "
                       "narrow='panels', or draw a single panel narrower):\n  " + "\n  ".join(small))


FILE_NAME = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif)$", re.IGNORECASE)


@pytest.mark.parametrize("page_path", CHAPTER_PAGES)
def test_every_image_has_alt_text(browser, base_url, page_path):
    """The alt text of a figure is its caption's first sentence (the figure cell's
    ``mystnb.image.alt``; an explorable's ``alt`` or caption); Sphinx's fallback, the
    image's file name, is not a description."""
    images = page_report(browser, base_url, page_path)["images"]
    bad = [f"{img['src']}… alt={img['alt']!r}" for img in images if not img["alt"] or FILE_NAME.search(img["alt"])]
    assert not bad, f"{page_path}: {len(bad)} of {len(images)} images have no alt text:\n  " + "\n  ".join(bad[:20])


@pytest.mark.parametrize("page_path", CHAPTER_PAGES)
def test_figures_are_numbered_in_order(browser, base_url, page_path):
    """Every figure is followed by its caption, which opens with the bold label
    ``Figure N.k.``: N the chapter, k = 1, 2, ... in order of appearance."""
    assert page_path != "<no built site>", f"no built site at {SITE}: run `make book` first"
    chapter = chapter_number(page_path)
    figures = page_report(browser, base_url, page_path)["figures"]
    assert figures, f"{page_path}: no figure found on the page"
    wrong = [f"figure {k} in §{f['section']}: followed by {f['next']!r}, expected the label 'Figure {chapter}.{k}.'"
             for k, f in enumerate(figures, 1) if f["label"] != f"Figure {chapter}.{k}."]
    assert not wrong, f"{page_path}: {len(wrong)} of {len(figures)} figures lack their numbered caption:\n  " + "\n  ".join(wrong)


def _press(root, control) -> None:
    """Change one control of an explorable: a range slider to its other end (keyboard),
    a toggle group to its next button (arrow key from the pressed one)."""
    if control.evaluate("el => el.tagName") == "INPUT":
        key = "Home" if control.input_value() == control.get_attribute("max") else "End"
        control.focus()
        control.press(key)
    else:
        control.locator("button[aria-pressed=true]").focus()
        control.locator("button[aria-pressed=true]").press("ArrowRight")


def _position(control) -> str:
    if control.evaluate("el => el.tagName") == "INPUT":
        return control.input_value()
    return control.get_attribute("data-index")


def _restore(control, position: str) -> None:
    """Put a control back where it was: a range by setting its value, a toggle by
    clicking the button it had pressed."""
    if control.evaluate("el => el.tagName") == "INPUT":
        control.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", position)
    else:
        control.locator(f"button[data-index='{position}']").click()


def check_explorable(root) -> None:
    """Every control of a kernel-free explorable changes the figure, and back: range
    sliders for ordered quantities, toggle buttons (reached and pressed by keyboard, and
    by pointer) for categorical choices."""
    assert root.get_attribute("data-ready") == "true", "explorable script did not initialise"
    payload = root.locator("script.isolab-explorable-data").inner_text()
    assert len(payload) < MAX_EXPLORABLE_BYTES, f"explorable frames take {len(payload)} bytes"
    image = root.locator("img.isolab-frame").first   # an explorable cut into panels shows it once a strip
    natural, shown = image.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert shown > 0 and natural >= 2 * shown - 1, (
        f"a frame {natural} px wide is shown {shown:.0f} px wide: draw it at twice the width the page shows "
        "(high-density screens)")
    controls = root.locator("input[type=range][data-name], div.isolab-toggle[data-name]")
    assert controls.count() >= 1
    for i in range(controls.count()):
        control = controls.nth(i)
        name = control.get_attribute("data-name")
        start_src, start = image.get_attribute("src"), _position(control)
        _press(root, control)
        assert _position(control) != start, f"control {name} did not move"
        assert image.get_attribute("src") != start_src, f"moving control {name} did not change the figure"
        if control.evaluate("el => el.tagName") == "INPUT":
            label = control.locator("xpath=following-sibling::output").inner_text()
            assert label, "the slider's value label is empty"
        else:
            pressed = control.locator("button[aria-pressed=true]")
            assert pressed.count() == 1, f"toggle {name}: {pressed.count()} buttons marked pressed"
            assert pressed.get_attribute("data-index") == _position(control), f"toggle {name}: the pressed button is not the choice"
        _restore(control, start)  # the figure must return to the frame it started from
        assert image.get_attribute("src") == start_src, f"returning control {name} did not restore the figure"
