"""The built book in a real browser: every chapter page renders its title, figures, diagrams
and math, has a working Colab link and collapsed solutions that open on click, interactive
figures whose every control changes the figure, no sideways scrolling at a phone's width, and
logs no console error. And the book works on any screen and for any reader: axe-core finds no
serious or critical violation on any page (at 1280 and 390 px), the menu and "Contents" buttons
work on a phone and the sidebar toggle on a laptop, every plot's alt text describes it, plots open
at full size, boxes that scroll sideways say so and take the keyboard, diagram text is at least
12 px, and print wraps code, leaves solutions out and shows interactive figures' default frame.

Needs the built HTML (``jupyter-book build . --all``), Debian's Chromium (``/usr/bin/chromium``)
and Python ``playwright`` (driving that executable; no browser download). Without them the tests
are skipped, unless ``FUNDAMENTALLM_REQUIRE_BROWSER=1`` (as in ``.ci/run``), where anything
missing is a failure.

The pages are served from ``_build/html`` on 127.0.0.1 and every other request is aborted and
reported: the book works offline (MathJax ships with it, from ``_vendor/mathjax``; axe-core ships
with the tests, in ``tests/vendor/axe-core``).
``FUNDAMENTALLM_SCREENSHOTS=DIR`` saves a full-page PNG of each chapter (solutions closed, then
one opened) for a person to look at.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from fundamentallm.a11y import alt_text_problems

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHROMIUM = Path(os.environ.get("FUNDAMENTALLM_CHROMIUM", "/usr/bin/chromium"))
REQUIRED = os.environ.get("FUNDAMENTALLM_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("FUNDAMENTALLM_SCREENSHOTS")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
    "--disable-domain-reliability", "--disable-sync", "--no-first-run", "--no-default-browser-check",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider",
    "--metrics-recording-only", "--safebrowsing-disable-auto-update",
]
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 900}
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
BRANCH = CONFIG["repository"].get("branch", "main")


def _toc_entries() -> list[str]:
    return re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)


# the numbered chapters (the appendix, book/records, has no number, math section or Colab edition)
CHAPTERS = [e for e in _toc_entries() if re.match(r"book/\d\d_", e) and (ROOT / f"{e}.ipynb").exists()]
# Chapters with interactive figures (fundamentallm.interactive) and how many each has at least.
EXPLORERS = {"book/02_attention_by_hand": 1, "book/03_multi_head_attention": 1, "book/04_positions": 2,
             "book/05_norms_residuals": 1, "book/06_pre_post_ln": 1, "book/07_full_model": 1,
             "book/08_tokens_data": 1, "book/09_training": 2, "book/10_sampling": 2,
             "book/14_modern_decoder": 1}


def _missing() -> str | None:
    if not (HTML / "index.html").exists():
        return f"no built book at {HTML} (run `jupyter-book build . --all`)"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python playwright is not installed (pip install playwright)"
    return None


@pytest.fixture(scope="module")
def site():
    """Serve _build/html on a free 127.0.0.1 port for the module; yields the base URL."""
    reason = _missing()
    if reason:
        if REQUIRED:
            pytest.fail(f"FUNDAMENTALLM_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A page opened offline, with its console errors and the external requests it tried."""

    def __init__(self, browser, url: str, viewport: dict = LAPTOP):
        self.context = browser.new_context(viewport=viewport, service_workers="block",
                                           has_touch=viewport["width"] < 600)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"console: {m.text} ({m.location.get('url', '')})"))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

        def route(r):
            request_url = r.request.url
            host = urlparse(request_url).hostname
            if host == "127.0.0.1":
                return r.continue_()
            self.blocked.append(request_url)
            return r.abort()

        self.context.route("**/*", route)
        self.page.goto(url, wait_until="load")

    def close(self):
        self.context.close()


@pytest.fixture
def open_page(browser):
    pages = []

    def _open(url, viewport=LAPTOP):
        pages.append(Page(browser, url, viewport))
        return pages[-1]

    yield _open
    for p in pages:
        p.close()


def _notebook_title(entry: str) -> str:
    import nbformat

    nb = nbformat.read(ROOT / f"{entry}.ipynb", as_version=4)
    first = nb.cells[0].source.splitlines()[0]
    return re.sub(r"[`*_]", "", first.removeprefix("# ")).strip()


def _diagrams(entry: str) -> list[str]:
    """File names of the diagrams (book/images/*.svg) that a chapter's markdown shows."""
    import nbformat

    nb = nbformat.read(ROOT / f"{entry}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return sorted(set(re.findall(r"images/([\w.-]+\.svg)", text)))


def _move_every_control(page) -> list[str]:
    """Move each slider and list of every interactive figure away from its first value (to its
    last, or its first if it starts at the last) and back: the image must change to a loaded
    frame and come back. Returns the problems found."""
    return page.evaluate("""() => {
        const problems = [];
        document.querySelectorAll("article .fl-explorer").forEach((root, n) => {
            const img = root.querySelector("img");
            root.querySelectorAll("[data-position]").forEach(control => {
                const name = control.getAttribute("aria-label");
                const count = control.tagName === "SELECT" ? control.options.length : +control.max + 1;
                if (count < 2) return;
                const start = control.value, before = img.src;
                const other = String(+start === count - 1 ? 0 : count - 1);
                control.value = other;
                control.dispatchEvent(new Event("input", {bubbles: true}));
                if (img.src === before || !img.src.startsWith("data:image/png"))
                    problems.push(`interactive figure ${n + 1}: moving ${name} to ${other} did not change the figure`);
                control.value = start;
                control.dispatchEvent(new Event("input", {bubbles: true}));
                if (img.src !== before)
                    problems.push(`interactive figure ${n + 1}: moving ${name} back did not restore the figure`);
            });
            if (!(img.complete && img.naturalWidth > 0))
                problems.push(`interactive figure ${n + 1}: its image did not load`);
        });
        return problems;
    }""")


def _wait_for_math(page) -> None:
    """Wait until MathJax has typeset the page (it loads deferred)."""
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                           timeout=30_000)
    page.evaluate("() => MathJax.startup.promise")


@pytest.mark.parametrize("entry", CHAPTERS, ids=[Path(e).name for e in CHAPTERS])
def test_chapter_page(site, open_page, entry):
    html_file = HTML / f"{entry}.html"
    assert html_file.exists(), f"{entry}.html was not built"
    p = open_page(f"{site}/{entry}.html")
    page, problems = p.page, []

    # The title: the notebook's '# Title', numbered by the toc.
    title = _notebook_title(entry)
    h1 = page.locator("article h1").first
    h1_text = h1.inner_text() if h1.count() else ""
    if title not in h1_text:
        problems.append(f"h1 is {h1_text!r}, expected it to contain the notebook title {title!r}")
    if not re.match(r"\d+\.\s", h1_text):
        problems.append(f"h1 {h1_text!r} carries no chapter number")

    # Figures: at least one image, and none broken.
    images = page.eval_on_selector_all(
        "article img", "els => els.map(e => [e.getAttribute('src'), e.complete, e.naturalWidth])")
    shown = [src for src, complete, width in images if complete and width > 0]
    broken = [src for src, complete, width in images if not (complete and width > 0)]
    if not shown:
        problems.append("no figure: no <img> with naturalWidth > 0 in the article")
    if broken:
        problems.append(f"broken images: {broken}")
    # Diagrams: every book/images/*.svg the chapter shows is on the page, loaded.
    for diagram in _diagrams(entry):
        if not any(src and Path(src).name == diagram and complete and width > 0
                   for src, complete, width in images):
            problems.append(f"diagram {diagram} is missing or did not load")

    # Alt text: every image says what it shows -- never a file name or hash (myst-nb's default for
    # a plot), and a notebook plot carries the description its kernel stored (fundamentallm.a11y).
    alts = page.eval_on_selector_all("article img", """els => els.map(e => [
        e.getAttribute('src').slice(0, 60), e.getAttribute('alt') || '', !!e.closest('.cell_output')])""")
    for src, alt, plot in alts:
        if len(alt.split()) < 3 or re.search(r"[0-9a-f]{16}|\.(png|svg|jpe?g)\b|^data:", alt):
            problems.append(f"image {src} has alt text {alt!r}, which does not say what it shows")
        elif plot and "no description was recorded" in alt:
            problems.append(f"plot {src} has no description in its PNG: {alt!r}")
        elif plot and alt_text_problems(alt.split(" (shown: ")[0]):  # an explorer adds what is shown
            problems.append(f"plot {src}: alt text {alt!r}: {alt_text_problems(alt.split(' (shown: ')[0])}")
    # Diagrams: their text is at least 12 px on the page at laptop width.
    small = page.evaluate("""async () => {
        const out = [];
        for (const img of document.querySelectorAll("article figure img[src$='.svg']")) {
            const text = await (await fetch(img.src)).text();
            const doc = new DOMParser().parseFromString(text, "image/svg+xml");
            const box = doc.documentElement.getAttribute("viewBox").split(/[ ,]+/).map(Number);
            const sizes = [...doc.querySelectorAll("[font-size]")].map(e => parseFloat(e.getAttribute("font-size")));
            const px = Math.min(...sizes) * img.getBoundingClientRect().width / box[2];
            if (px < 11.95) out.push(`${img.src.split('/').pop()}: ${px.toFixed(1)} px`);
        }
        return out;
    }""")
    if small:
        problems.append(f"diagram text smaller than 12 px at 1280 px: {small}")

    # Interactive figures (fundamentallm.interactive): each control, moved, changes the figure.
    n_explorers = page.locator("article .fl-explorer").count()
    if n_explorers < EXPLORERS.get(entry, 0):
        problems.append(f"{n_explorers} interactive figures, expected {EXPLORERS[entry]}")
    problems += _move_every_control(page)

    # Math: MathJax typeset every math element, without TeX errors.
    n_math = page.locator("article .math").count()
    if n_math == 0:
        problems.append("no math on the page (the chapter has a '## The math' section)")
    else:
        try:
            _wait_for_math(page)
        except Exception as e:  # playwright's TimeoutError, or MathJax failing to start
            problems.append(f"MathJax did not start: {e}".splitlines()[0])
        untypeset = page.eval_on_selector_all(
            "article .math", "els => els.filter(e => !e.querySelector('mjx-container')).length")
        if untypeset:
            problems.append(f"{untypeset} of {n_math} math elements were not typeset by MathJax")
        tex_errors = page.eval_on_selector_all(
            "article mjx-merror", "els => els.map(e => e.getAttribute('data-mjx-error') || e.textContent)")
        if tex_errors:
            problems.append(f"TeX errors: {tex_errors}")
        # Raw TeX shown as text (a macro inside \text{...} is not expanded by MathJax).
        raw_tex = page.eval_on_selector_all(
            "article mjx-container mjx-utext", "els => els.map(e => e.textContent).filter(t => t.includes('\\\\'))")
        if raw_tex:
            problems.append(f"math shows raw TeX: {raw_tex}")
        # A display equation must fit the text column and not run under its number (MathJax 3
        # does not break lines: split a long equation with aligned or over two equations).
        too_wide = page.eval_on_selector_all("article div.math", """els => els.flatMap(e => {
            const m = e.querySelector('mjx-container mjx-math'), n = e.querySelector('.eqno');
            if (!m) return [];
            const d = e.getBoundingClientRect(), r = m.getBoundingClientRect();
            const q = n ? n.getBoundingClientRect() : null;
            const over = Math.max(d.left - r.left, r.right - d.right, q ? r.right - q.left : 0);
            return over > 1 ? [`${e.id || 'an unlabelled equation'} by ${Math.round(over)} px`] : [];
        })""")
        if too_wide:
            problems.append(f"display equations wider than the column or overlapping their "
                            f"number: {too_wide}")

    # The Colab launch link points at this chapter's Colab/Jupyter edition (colab/NN_name.ipynb).
    expected_colab = (f"https://colab.research.google.com/github/{REPO_URL.removeprefix('https://github.com/')}"
                      f"/blob/{BRANCH}/colab/{Path(entry).name}.ipynb")
    colab = page.locator("a[href*='colab.research.google.com']")
    hrefs = [colab.nth(i).get_attribute("href") for i in range(colab.count())]
    if expected_colab not in hrefs:
        problems.append(f"Colab link {hrefs} is not {expected_colab}")
    else:
        # It is reachable from the launch menu (the rocket button).
        link = page.locator(f"a[href='{expected_colab}']").first
        menu = page.locator(".dropdown-launch-buttons button").first
        if menu.count():
            menu.click()
            try:
                link.wait_for(state="visible", timeout=5_000)
            except Exception:
                problems.append("the Colab link does not appear when the launch menu is opened")
            page.keyboard.press("Escape")
            page.mouse.move(0, 0)

    # Solutions: collapsed by default, opened by a click on their title.
    solutions = page.locator("article .solution.dropdown")
    n_solutions = solutions.count()
    if n_solutions < 3:
        problems.append(f"{n_solutions} dropdown solutions, expected >= 3")
    for i in range(n_solutions):
        solution = solutions.nth(i)
        body = solution.locator(":scope > :not(.admonition-title)").first
        if body.count() == 0 or body.is_visible():
            problems.append(f"solution {i + 1} is not collapsed on load")
            continue
    if SCREENSHOTS:
        out = Path(SCREENSHOTS)
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / f"{Path(entry).name}.png"), full_page=True)
    for i in range(n_solutions):
        solution = solutions.nth(i)
        body = solution.locator(":scope > :not(.admonition-title)").first
        # The chevron button in the title is the control (sphinx-togglebutton).
        solution.locator(".admonition-title .toggle-button").first.click()
        try:
            body.wait_for(state="visible", timeout=5_000)
        except Exception:
            problems.append(f"solution {i + 1} does not open when its toggle button is clicked")
    if SCREENSHOTS and n_solutions:
        solutions.first.scroll_into_view_if_needed()
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{Path(entry).name}-solution.png"))

    problems += p.errors
    if p.blocked:
        problems.append(f"the page requested external resources (blocked): {sorted(set(p.blocked))}")
    assert not problems, f"{entry}.html:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("entry", CHAPTERS, ids=[Path(e).name for e in CHAPTERS])
def test_chapter_fits_a_phone(site, browser, entry):
    """At a phone's width (390 px) the page does not scroll sideways: wide code, outputs, tables
    and figures shrink or scroll inside their own box. An interactive figure fits the column (no
    sideways scrolling inside it either), and no "Enlarge" button covers its plot."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, service_workers="block",
                                  has_touch=True)
    try:
        page = context.new_page()
        page.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).hostname == "127.0.0.1"
                   else r.abort())
        page.goto(f"{site}/{entry}.html", wait_until="load")
        page.wait_for_timeout(500)
        wide = page.evaluate("""() => {
            const limit = document.documentElement.clientWidth;
            const out = [];
            document.querySelectorAll("article *").forEach(e => {
                const r = e.getBoundingClientRect();
                if (r.width > 0 && r.right > limit + 1 && !e.closest("mjx-container")) {
                    let p = e.parentElement, clipped = false;
                    for (; p && p !== document.body; p = p.parentElement) {
                        const o = getComputedStyle(p).overflowX;
                        if (o === "auto" || o === "scroll" || o === "hidden") { clipped = true; break; }
                    }
                    if (!clipped) out.push(`${e.tagName.toLowerCase()}.${e.className} to ${Math.round(r.right)} px`);
                }
            });
            return [document.documentElement.scrollWidth, limit, out.slice(0, 5)];
        }""")
        scroll_width, width, culprits = wide
        # A table printed as text keeps each row on one line (it scrolls in its own box instead).
        wrapped = page.eval_on_selector_all("article pre.fl-text-table", """els => els.filter(e =>
            getComputedStyle(e).whiteSpace !== 'pre').map(e => e.textContent.slice(0, 40))""")
        assert not wrapped, f"{entry}.html: tables printed as text wrap mid-row at 390 px: {wrapped}"
        if SCREENSHOTS:
            out = Path(SCREENSHOTS)
            out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out / f"{Path(entry).name}-390px.png"), full_page=True)
        assert scroll_width <= width + 1 and not culprits, \
            f"{entry}.html is {scroll_width} px wide on a {width} px phone: {culprits}"
        explorers = page.eval_on_selector_all("article .fl-explorer", """els => els.filter(e =>
            e.scrollWidth > e.clientWidth + 1).map(e => e.querySelector('.fl-title')?.textContent)""")
        assert not explorers, f"{entry}.html: interactive figures scroll sideways at 390 px: {explorers}"
        covered = page.eval_on_selector_all("article .fl-enlarge", """els => els.filter(b => {
            const i = b.parentElement.querySelector('img').getBoundingClientRect(), r = b.getBoundingClientRect();
            return r.width > 0 && r.left < i.right && r.right > i.left && r.top < i.bottom && r.bottom > i.top;
        }).length""")
        assert covered == 0, f"{entry}.html: {covered} Enlarge buttons cover their plot at 390 px"
    finally:
        context.close()


def test_index_redirects_to_the_intro_and_lists_every_page(site, open_page):
    p = open_page(f"{site}/index.html")
    page = p.page
    page.wait_for_url(re.compile(r".*/book/intro\.html$"), timeout=10_000)
    assert "Introduction" in page.locator("article h1").first.inner_text()
    assert "FundamentaLLM" in page.title()
    nav = page.eval_on_selector_all("nav.bd-links a.reference.internal", "els => els.map(e => e.getAttribute('href'))")
    for entry in _toc_entries()[1:]:
        name = Path(entry).name
        assert any(href and href.split("#")[0].endswith(f"{name}.html") for href in nav), \
            f"the sidebar does not link {entry}: {nav}"
    # The intro shows no math: MathJax (1.16 MB) is not loaded (fundamentallm.a11y).
    assert not page.locator("script[src*='mathjax']").count(), "the intro loads MathJax"
    n_numbered = page.locator("nav.bd-links a.reference.internal", has_text=re.compile(r"^\d+\.\s")).count()
    assert n_numbered == len([e for e in _toc_entries() if re.match(r"book/\d\d_", e)])
    assert not p.errors, p.errors
    assert not p.blocked, f"external requests: {p.blocked}"


def test_search_finds_pages(site, open_page):
    p = open_page(f"{site}/search.html?q=attention")
    page = p.page
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(state="attached", timeout=30_000)
    assert results.count() >= 1
    assert not p.errors, p.errors
    assert not p.blocked, f"external requests: {p.blocked}"


def test_bibliography_page_lists_references(site, open_page):
    p = open_page(f"{site}/book/bibliography.html")
    text = p.page.locator("article").inner_text()
    assert "attention is all you need" in text.lower()
    assert not p.errors, p.errors
    assert not p.blocked, f"external requests: {p.blocked}"


# ---- The book on any screen and for any reader ------------------------------------------------

# Every page of the book: the intro, the chapters, the appendix and the instructors' part.
PAGES = _toc_entries()
AXE_IMPACTS = ("serious", "critical")


def _axe(page) -> list[dict]:
    """Run axe-core (vendored) on the page once it has settled (MathJax typeset, scripts run)."""
    if page.locator("article .math").count():
        _wait_for_math(page)
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    return page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ["violations"]});
        return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + ": " + (n.failureSummary || "").split("\\n").slice(1, 2).join(""))}));
    }""")


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280px", "390px"])
@pytest.mark.parametrize("entry", PAGES, ids=[Path(e).name for e in PAGES])
def test_axe_finds_no_serious_or_critical_violation(site, open_page, entry, viewport):
    """axe-core's WCAG 2.x A/AA rules and best practices: nothing serious or critical (contrast,
    names of buttons and links, ARIA roles, keyboard access to scrolling boxes...)."""
    assert AXE.exists(), f"axe-core is missing: {AXE} (see tests/vendor/axe-core/SOURCE.txt)"
    p = open_page(f"{site}/{entry}.html", viewport)
    violations = [v for v in _axe(p.page) if v["impact"] in AXE_IMPACTS]
    report = [f"{v['impact']} {v['id']} ({v['help']}): {v['nodes']}" for v in violations]
    assert not report, f"{entry}.html at {viewport['width']} px:\n  " + "\n  ".join(report)
    assert not p.blocked, f"external requests: {p.blocked}"


def _visible(page, selector: str):
    loc = page.locator(selector)
    for i in range(loc.count()):
        if loc.nth(i).is_visible():
            return loc.nth(i)
    raise AssertionError(f"no visible {selector}")


@pytest.mark.parametrize("width", [390, 800])
def test_menu_and_contents_buttons_work_on_phones_and_tablets(site, open_page, width):
    """Below 992 px the menu button opens the site navigation and the "Contents" button the page's
    contents, each in a dialog that Escape closes (pydata-sphinx-theme 0.17's are dead: #2451)."""
    entry = CHAPTERS[4]
    p = open_page(f"{site}/{entry}.html", {"width": width, "height": 844})
    page = p.page
    assert not page.locator("#pst-primary-sidebar nav.bd-links").first.is_visible()

    menu = _visible(page, ".primary-toggle")
    menu.click()
    dialog = page.locator("#pst-primary-sidebar-modal")
    assert dialog.evaluate("d => d.open"), "the menu button did not open the navigation"
    chapter_links = dialog.locator("nav.bd-links a.reference.internal")
    assert chapter_links.count() >= len(CHAPTERS)
    assert chapter_links.nth(1).is_visible()
    page.keyboard.press("Escape")
    assert not dialog.evaluate("d => d.open")
    assert page.evaluate("document.activeElement.classList.contains('primary-toggle')"), \
        "focus did not return to the menu button"
    # The navigation went back to its sidebar: the menu opens again, and its links lead somewhere.
    _visible(page, ".primary-toggle").click()
    assert dialog.evaluate("d => d.open")
    target = dialog.locator("nav.bd-links a.reference.internal", has_text=re.compile(r"^1\.\s")).first
    target.click()
    page.wait_for_url(re.compile(rf".*/{CHAPTERS[0]}\.html$"), timeout=10_000)

    page.goto(f"{site}/{entry}.html", wait_until="load")
    _visible(page, ".secondary-toggle").click()
    contents = page.locator("#pst-secondary-sidebar-modal")
    assert contents.evaluate("d => d.open"), "the Contents button did not open the page's contents"
    toc = contents.locator("nav.page-toc a.nav-link")
    assert toc.count() >= 5 and toc.first.is_visible()
    page.keyboard.press("Escape")
    assert not contents.evaluate("d => d.open")
    assert not p.errors, p.errors


def _scroll_through(page) -> None:
    """Scroll from the top of the page to the bottom and back in steps, so that every observer
    (the theme hides its contents column while a wide figure is on screen) fires."""
    height = page.evaluate("document.documentElement.scrollHeight")
    for y in list(range(0, height, 700)) + [0]:
        page.evaluate(f"window.scrollTo(0, {y})")
        page.wait_for_timeout(20)
    page.wait_for_timeout(100)


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280px", "390px"])
@pytest.mark.parametrize("entry", PAGES, ids=[Path(e).name for e in PAGES])
def test_navigation_panels_work_without_a_page_error(site, open_page, entry, viewport):
    """Every page, at 1280 and 390 px, with its navigation used: no page error or console error.
    On a phone each panel ("Contents", the menu) opens as a dialog with a Close button; the page
    scrolls under the open panel without a script error (sphinx-book-theme looks the contents
    column up by class when a wide figure comes into view); Escape closes it even after a tap
    inside it; picking a section closes it, follows the link and moves the keyboard focus to that
    section; the Close button closes it and returns the focus to the button that opened it. On a
    laptop the sidebar toggle hides and shows the sidebar while the page is scrolled."""
    p = open_page(f"{site}/{entry}.html", viewport)
    page, problems = p.page, []
    if viewport is LAPTOP:
        toggle = _visible(page, ".primary-toggle")
        for _ in range(2):
            toggle.click()
            page.wait_for_timeout(350)
            _scroll_through(page)
        assert page.locator("#pst-primary-sidebar").is_visible()
    else:
        contents = page.locator("#pst-secondary-sidebar-modal")
        has_toc = any(page.locator(".secondary-toggle").nth(i).is_visible()
                      for i in range(page.locator(".secondary-toggle").count()))
        if has_toc:
            _visible(page, ".secondary-toggle").tap()
            assert contents.evaluate("d => d.open"), "the Contents button did not open the contents"
            close = contents.locator(":scope > button.fl-dialog-close")
            assert close.is_visible() and close.inner_text().strip() == "Close"
            _scroll_through(page)
            contents.locator(".onthispage, nav").first.tap()  # a tap inside, on no link
            page.keyboard.press("Escape")
            if contents.evaluate("d => d.open"):
                problems.append("Escape did not close the contents after a tap inside it")
                page.evaluate("document.querySelector('#pst-secondary-sidebar-modal').close()")
            assert page.locator("div.bd-sidebar-secondary").count() == 1
            _visible(page, ".secondary-toggle").tap()
            links = contents.locator("nav.page-toc a.nav-link")
            link = next(links.nth(i) for i in range(links.count()) if links.nth(i).is_visible()
                        and i > 0)
            href = link.get_attribute("href")
            link.tap()
            page.wait_for_timeout(300)
            if contents.evaluate("d => d.open"):
                problems.append(f"picking {href} left the contents open")
            if not page.url.endswith(href):
                problems.append(f"picking {href} went to {page.url}")
            focused = page.evaluate("document.activeElement.id")
            if focused != href.lstrip("#"):
                problems.append(f"after picking {href} the focus is on #{focused}")
        menu = page.locator("#pst-primary-sidebar-modal")
        _visible(page, ".primary-toggle").tap()
        assert menu.evaluate("d => d.open"), "the menu button did not open the navigation"
        _scroll_through(page)
        menu.locator(":scope > button.fl-dialog-close").tap()
        if menu.evaluate("d => d.open"):
            problems.append("the Close button did not close the navigation")
        if not page.evaluate("document.activeElement.classList.contains('primary-toggle')"):
            problems.append("closing the navigation did not return the focus to the menu button")
        if page.locator("#pst-primary-sidebar nav.bd-links").count() != 1:
            problems.append("the navigation did not go back to its sidebar")
        _visible(page, ".primary-toggle").tap()
        page.keyboard.press("Escape")
        if menu.evaluate("d => d.open"):
            problems.append("Escape did not close the navigation")
    problems += p.errors
    assert not problems, f"{entry}.html at {viewport['width']} px:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("entry", CHAPTERS, ids=[Path(e).name for e in CHAPTERS])
def test_display_equations_too_wide_for_a_phone_say_they_scroll(site, open_page, entry):
    """At 390 px a display equation wider than the column (about two thirds of them in ch02, ch04
    and ch05 on 2026-11-28: 14 of 21) scrolls in its own box: the box shows the "scroll" hint and
    a shadow, and takes the keyboard (focusable), so that an equation is never cut off silently."""
    p = open_page(f"{site}/{entry}.html", PHONE)
    page = p.page
    if not page.locator("article div.math").count():
        pytest.skip("no display equation")
    _wait_for_math(page)
    page.wait_for_timeout(300)
    silent = page.eval_on_selector_all("article div.math mjx-container[display='true']", """els => els.flatMap(m => {
        const math = m.querySelector('mjx-math'), column = m.closest('div.math').getBoundingClientRect();
        const over = m.scrollWidth - m.clientWidth > 2 || math.getBoundingClientRect().right > column.right + 1;
        if (!over) return [];
        const wrap = m.parentElement.classList.contains('fl-scroll') ? m.parentElement : null;
        const hint = wrap && wrap.querySelector('.fl-scroll-hint');
        const scrolls = ['auto', 'scroll'].includes(getComputedStyle(m).overflowX);
        const ok = scrolls && hint && getComputedStyle(hint).display !== 'none' && m.tabIndex === 0;
        return ok ? [] : [(m.closest('div.math').id || 'an unlabelled equation') + ': ' + m.textContent.slice(0, 30)];
    })""")
    assert not silent, f"{entry}.html at 390 px: equations cut off with no sign that they scroll: {silent}"
    assert not p.errors, p.errors


@pytest.mark.parametrize("entry", CHAPTERS, ids=[Path(e).name for e in CHAPTERS])
def test_formulas_are_not_tab_stops_and_code_boxes_are_not_landmarks(site, open_page, entry):
    """A keyboard user tabs through links and controls, not formulas: MathJax's menu setting
    inTabOrder is off (_config.yml), so only a display equation that scrolls is focusable, while
    each formula keeps its assistive MathML for screen readers. Scrolling code boxes are named
    groups, not region landmarks. A link to the next page is at most 60 Tab stops from the top:
    the second skip link ("Skip to the next page", shown while focused) is the 2nd stop. The
    "next" link at the bottom of the page, at 1280 px, measured 2026-12-07 on all 17 chapters:
    119-194 (ch04 173, ch05 131, ch09 194, ch10 146; from 370-430 before formulas left the Tab
    order, and ch04 211, ch09 219 before a code box became one stop with its copy button); most
    of ch09's are copy buttons (63), links in the text and the quiz's options: bounded here at
    210."""
    p = open_page(f"{site}/{entry}.html")
    page = p.page
    _wait_for_math(page)
    page.wait_for_timeout(300)
    stops = page.evaluate("""() => [...document.querySelectorAll('article mjx-container')].filter(m =>
        m.tabIndex >= 0 && !(m.parentElement.classList.contains('fl-scroll'))).length""")
    assert stops == 0, f"{entry}.html: {stops} formulas are Tab stops"
    unread = page.evaluate("""() => [...document.querySelectorAll('article mjx-container')].filter(m =>
        !m.querySelector('mjx-assistive-mml math') && !m.getAttribute('aria-label')).length""")
    assert unread == 0, f"{entry}.html: {unread} formulas have nothing for a screen reader"
    regions = page.eval_on_selector_all("article [role=region]", "els => els.map(e => e.getAttribute('aria-label'))")
    assert not [r for r in regions if r and r.startswith("Code")], f"code boxes as landmarks: {regions}"
    page.evaluate("window.scrollTo(0, 0)")
    n, to_next = 0, None
    for n in range(1, 400):  # noqa: B007 (n, read after the loop, counts the Tab stops)
        page.keyboard.press("Tab")
        at = page.evaluate("""() => { const a = document.activeElement, next = document.querySelector('a.right-next');
            return [!!next && a.href === next.href && !a.closest('.bd-sidebar-primary'), a.matches('a.right-next')]; }""")
        if at[0] and to_next is None:
            to_next = n
            page.wait_for_timeout(300)  # the skip links slide in while one has the focus
            box = page.evaluate("document.activeElement.getBoundingClientRect().toJSON()")
            assert box["top"] >= 0 and box["height"] > 0, f"the link to the next page is focused but hidden: {box}"
        if at[1]:
            break
    else:
        pytest.fail(f"{entry}.html: the next link is not reached in 400 Tab stops")
    assert to_next is not None and to_next <= 60, f"{entry}.html: {to_next} Tab stops to a link to the next page"
    assert n <= 210, f"{entry}.html: {n} Tab stops to the next chapter"
    assert not p.errors, p.errors


def test_top_p_sliders_show_an_effect_at_every_stop(site, open_page):
    """Chapter 10's two explorers: the top-p slider runs low to high (1 = off at the right, like the
    temperature and top-k sliders), reaches down to a p that keeps one or two tokens, and every
    move of it by one stop changes the figure, whatever the other controls show. Measured
    2026-12-07: the first explorer ran 1.0, 0.9, 0.6 from left to right (its thumb started at the
    left end, so it could not be moved down), and with top-k = 5 the first step changed nothing
    at any of the 5 temperatures; both stopped at 0.6 (8 of 105 tokens kept at temperature 1)."""
    entry = next(e for e in CHAPTERS if Path(e).name.startswith("10_"))
    p = open_page(f"{site}/{entry}.html")
    report = p.page.evaluate("""() => [...document.querySelectorAll('article .fl-explorer')].flatMap((root, n) => {
        const slider = root.querySelector("[data-position][aria-label='top_p']");
        if (!slider) return [];
        const img = root.querySelector('img'), problems = [];
        const others = [...root.querySelectorAll('[data-position]')].filter(c => c !== slider);
        const size = c => c.tagName === 'SELECT' ? c.options.length : +c.max + 1;
        const set = (c, v) => { c.value = String(v); c.dispatchEvent(new Event('input', {bubbles: true})); };
        const stops = [];
        for (let i = 0; i < size(slider); i++) { set(slider, i); stops.push(+slider.getAttribute('aria-valuetext')); }
        if (stops.some((v, i) => i && v <= stops[i - 1])) problems.push(`explorer ${n + 1}: top-p stops ${stops} do not rise from left to right`);
        if (Math.min(...stops) > 0.25 || Math.max(...stops) !== 1) problems.push(`explorer ${n + 1}: top-p stops ${stops} do not span 0.25 or less to 1`);
        const combos = others.reduce((acc, c) => acc.flatMap(a => [...Array(size(c)).keys()].map(v => [...a, v])), [[]]);
        for (const combo of combos) {
            combo.forEach((v, i) => set(others[i], v));
            for (let i = 1; i < size(slider); i++) {
                set(slider, i - 1); const before = img.src;
                set(slider, i);
                if (img.src === before) problems.push(`explorer ${n + 1}: top-p ${stops[i - 1]} -> ${stops[i]} changes nothing at ` +
                    others.map((c, j) => `${c.getAttribute('aria-label')} position ${combo[j]}`).join(', '));
            }
        }
        return [[n + 1, combos.length, problems]];
    })""")
    assert len(report) >= 2, f"{entry}.html: {len(report)} explorers with a top-p slider, expected 2"
    problems = [line for _, _, lines in report for line in lines]
    assert not problems, f"{entry}.html:\n  " + "\n  ".join(problems[:12])
    assert not p.errors, p.errors


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280px", "390px"])
def test_a_code_box_and_its_copy_button_are_one_tab_stop(site, open_page, viewport):
    """A code box that scrolls sideways was two Tab stops, the box (to scroll it with the arrow
    keys) and its copy button (ch04 at 1280 px: 40 boxes, 47 buttons). The button now sits inside
    the box: Tab reaches the button, and with it focused the arrow keys, Home and End scroll the
    code; the box itself leaves the Tab order, and the button still copies that box's code."""
    p = open_page(f"{site}/{CHAPTERS[3]}.html", viewport)
    page = p.page
    _wait_for_math(page)
    page.wait_for_timeout(300)
    # code (not printed output: it has no copy button) that scrolls sideways
    boxes = page.eval_on_selector_all("article div.highlight pre", """els => els.filter(e =>
        e.scrollWidth > e.clientWidth + 2 && e.closest('div.highlight').querySelector('button.copybtn')
        ).map(e => { const b = e.closest('div.highlight').querySelector('button.copybtn');
        return [e.tabIndex >= 0, b.tabIndex >= 0, document.querySelector(b.dataset.clipboardTarget) === e]; })""")
    assert len(boxes) >= 10, f"only {len(boxes)} code boxes scroll sideways at {viewport['width']} px"
    two_stops = sum(1 for box_stop, button_stop, _ in boxes if box_stop and button_stop)
    assert two_stops == 0, f"{two_stops} of {len(boxes)} code boxes are two Tab stops (box and copy button)"
    assert all(button and target for _, button, target in boxes), "a copy button is not a Tab stop or lost its box"
    pre = page.locator("article div.highlight pre:has(> button.copybtn)").first
    pre.scroll_into_view_if_needed()
    pre.locator("button.copybtn").focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    assert pre.evaluate("e => e.scrollLeft") > 0, "the arrow keys did not scroll the code from its copy button"
    page.keyboard.press("End")
    assert pre.evaluate("e => e.scrollLeft + e.clientWidth >= e.scrollWidth - 2"), "End did not reach the end"
    page.keyboard.press("Home")
    assert pre.evaluate("e => e.scrollLeft") == 0
    assert not p.errors, p.errors


def test_phone_title_and_quiz_spacing(site, open_page):
    """On a phone (390 x 844) the longest chapter title takes at most two lines and 10 % of the
    first screen (the theme's heading took four lines, 193 px, of ch15's); in a quiz, a question
    stands apart from the previous question's options (at least 3 times the gap between two
    options) and no option shows raw Markdown."""
    titles = {e: _notebook_title(e) for e in CHAPTERS}
    entry = max(titles, key=lambda e: len(titles[e]))
    p = open_page(f"{site}/{entry}.html", PHONE)
    page = p.page
    h1 = page.locator("article h1").first.bounding_box()
    line = page.locator("article h1").first.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
    assert h1["height"] <= 2 * line + 1 and h1["height"] <= 0.10 * PHONE["height"], \
        f"{entry}.html: the title is {h1['height']:.0f} px high at 390 px ({line:.0f} px a line)"
    gaps = page.evaluate("""() => [
        Math.min(...[...document.querySelectorAll('article details + p')].map(e =>
            e.getBoundingClientRect().top - e.previousElementSibling.getBoundingClientRect().bottom)),
        Math.max(...[...document.querySelectorAll('article details + details')].map(e =>
            e.getBoundingClientRect().top - e.previousElementSibling.getBoundingClientRect().bottom)),
        [...document.querySelectorAll('article details > summary')].filter(e => /`|\\*\\*/.test(e.textContent)).length]""")
    between_questions, between_options, raw = gaps
    assert between_questions >= 3 * max(between_options, 1), \
        f"{entry}.html: a question is {between_questions:.0f} px below the previous options, which are {between_options:.0f} px apart"
    assert raw == 0, f"{entry}.html: {raw} quiz options show raw Markdown"
    assert not p.errors, p.errors


def test_colour_switch_toggles_light_and_dark(site, open_page):
    """Each click on the colour-mode switch changes the colours (the theme's cycle went light ->
    auto first, which on a light system looks the same: the first click seemed dead)."""
    p = open_page(f"{site}/{CHAPTERS[0]}.html")
    page = p.page
    switch = _visible(page, ".theme-switch-button")
    seen = [page.evaluate("document.documentElement.dataset.theme")]
    for _ in range(3):
        switch.click()
        seen.append(page.evaluate("document.documentElement.dataset.theme"))
    assert seen == ["light", "dark", "light", "dark"], seen
    assert not p.errors, p.errors


@pytest.mark.parametrize("width", [1280, 991, 390])
def test_no_empty_header_band_and_one_search_button(site, open_page, width):
    """The page starts with its own header and title: the theme's top band (64 px, holding a
    second search button at 992 px and wider, nothing at 960-991 px; measured 2026-12-07) is gone,
    one search button is shown, and it opens the search."""
    p = open_page(f"{site}/{CHAPTERS[1]}.html", {"width": width, "height": 800})
    page = p.page
    band = page.evaluate("() => { const h = document.querySelector('#pst-header'); "
                         "return h ? h.getBoundingClientRect().height : 0; }")
    assert band == 0, f"an empty header band {band} px high at {width} px"
    buttons = page.locator(".search-button__button")
    shown = [i for i in range(buttons.count()) if buttons.nth(i).is_visible()]
    assert len(shown) == 1, f"{len(shown)} search buttons shown at {width} px"
    if width < 992:  # the site navigation holds the sidebar's search field: the page's own button
        assert page.locator(".bd-header-article .search-button__button").first.is_visible()
    buttons.nth(shown[0]).click()
    assert page.locator("#pst-search-dialog").evaluate("d => d.open"), "the search button did not open the search"
    page.keyboard.press("Escape")
    assert not p.errors, p.errors


def test_sidebar_toggle_hides_and_shows_the_sidebar_on_a_laptop(site, open_page):
    p = open_page(f"{site}/{CHAPTERS[0]}.html")
    page = p.page
    nav = page.locator("#pst-primary-sidebar")
    assert nav.is_visible()
    toggle = _visible(page, ".primary-toggle")
    toggle.click()
    page.wait_for_timeout(400)  # the theme's slide-out transition
    assert not nav.is_visible(), "the sidebar toggle did not hide the sidebar"
    assert toggle.get_attribute("aria-expanded") == "false"
    assert not page.locator("#pst-primary-sidebar-modal").evaluate("d => d.open")
    toggle.click()
    page.wait_for_timeout(400)
    assert nav.is_visible() and toggle.get_attribute("aria-expanded") == "true"
    assert not p.errors, p.errors


def test_plots_open_at_full_size_on_a_phone(site, open_page):
    """A plot shrunk to a phone's width opens at its full size in a dialog (its Enlarge button or
    a tap on it), with the same alt text; Close returns to the page."""
    p = open_page(f"{site}/{CHAPTERS[8]}.html", PHONE)
    page = p.page
    plot = page.locator("article .cell_output img.fl-zoomable").first
    plot.scroll_into_view_if_needed()
    shown_width = plot.bounding_box()["width"]
    plot.locator("xpath=following-sibling::button[contains(@class, 'fl-enlarge')]").click()
    zoom = page.locator("dialog.fl-zoom")
    assert zoom.evaluate("d => d.open")
    big = zoom.locator("img")
    assert big.get_attribute("alt") == plot.get_attribute("alt")
    assert big.bounding_box()["width"] > shown_width * 1.3, "the enlarged plot is not larger"
    zoom.locator("button.fl-zoom-close").click()
    assert not zoom.evaluate("d => d.open")
    plot.click()  # a tap on the image does the same
    assert zoom.evaluate("d => d.open")
    page.keyboard.press("Escape")
    assert not zoom.evaluate("d => d.open")
    assert not p.errors, p.errors


def test_wide_boxes_say_they_scroll_and_take_the_keyboard(site, open_page):
    """At 390 px a diagram keeps 600 px and scrolls inside its box: the box shows a 'scroll' hint
    and a shadow on the side with more, is focusable with a name, and the arrow keys scroll it."""
    entry = next(e for e in CHAPTERS if _diagrams(e))
    p = open_page(f"{site}/{entry}.html", PHONE)
    page = p.page
    box = page.locator("article .fl-scroll > figure").first
    assert box.count(), "no diagram scrolls in a box marked as scrolling"
    wrap = box.locator("xpath=..")
    box.scroll_into_view_if_needed()
    assert "fl-more-right" in wrap.get_attribute("class")
    assert wrap.locator(".fl-scroll-hint").is_visible()
    assert box.get_attribute("tabindex") == "0" and "scrolls sideways" in box.get_attribute("aria-label")
    box.focus()
    for _ in range(20):
        page.keyboard.press("ArrowRight")
    page.wait_for_timeout(300)
    assert box.evaluate("b => b.scrollLeft") > 0, "the arrow keys did not scroll the box"
    box.evaluate("b => { b.scrollLeft = b.scrollWidth; b.dispatchEvent(new Event('scroll')); }")
    page.wait_for_timeout(100)
    classes = wrap.get_attribute("class")
    assert "fl-more-left" in classes and "fl-more-right" not in classes
    assert not p.errors, p.errors


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280px", "390px"])
def test_scroll_hints_cover_nothing(site, open_page, viewport):
    """The "scroll \u2192" hint of a box that scrolls sideways sits under the box, in a line of its
    own, never on its content: on 2026-12-07 every shown hint (ch04: 64 at 390 px, 46 at 1280 px;
    code, equations, diagrams, tables) lay on its box's bottom-right corner, over code, the end of
    an equation or a diagram's axis label."""
    p = open_page(f"{site}/{CHAPTERS[3]}.html", viewport)
    page = p.page
    _wait_for_math(page)
    page.wait_for_timeout(300)
    hints = page.eval_on_selector_all("article .fl-scroll.fl-more-right", """els => els.map(w => {
        const box = w.firstElementChild.getBoundingClientRect();
        const h = w.querySelector('.fl-scroll-hint').getBoundingClientRect();
        const covers = h.top < box.bottom - 0.5 && h.bottom > box.top + 0.5 && h.left < box.right && h.right > box.left;
        return [h.width > 0 && h.height > 0, covers, w.firstElementChild.tagName.toLowerCase()];
    })""")
    assert len(hints) >= 10, f"only {len(hints)} boxes scroll sideways at {viewport['width']} px"
    hidden = [tag for shown, _, tag in hints if not shown]
    covering = [tag for shown, covers, tag in hints if shown and covers]
    assert not hidden, f"boxes that scroll with no hint shown: {hidden}"
    assert not covering, f"{len(covering)} of {len(hints)} scroll hints cover their box: {covering[:5]}"
    assert not p.errors, p.errors


def test_print_wraps_code_and_leaves_solutions_out(site, open_page):
    """In print, no code line is cut at the right edge, solution bodies are left out (their
    titles say so) and an interactive figure is its default frame without its controls."""
    for entry in [CHAPTERS[3], CHAPTERS[9]]:
        p = open_page(f"{site}/{entry}.html")
        page = p.page
        explorers = page.locator("article .fl-explorer")
        if explorers.count():  # move a control: print must still show the default frame
            control = explorers.first.locator("[data-position]").first
            control.evaluate("c => { c.value = c.tagName === 'SELECT' ? '1' : c.max; "
                             "c.dispatchEvent(new Event('input', {bubbles: true})); }")
        page.emulate_media(media="print")
        page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
        cut = page.eval_on_selector_all("article pre", """els => els.filter(e =>
            e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.trim().slice(0, 60))""")
        assert not cut, f"{entry}: code cut at the right edge in print: {cut[:3]}"
        # Quiz options print as boxes to tick, not as disclosure triangles.
        triangles = page.eval_on_selector_all("article details:not([class]) > summary", """els => els.filter(e =>
            getComputedStyle(e).listStyleType !== 'none' || !getComputedStyle(e, '::before').content.includes('\u2610')).length""")
        assert not triangles, f"{entry}: {triangles} quiz options print as triangles"
        solutions = page.locator("article div.solution")
        assert solutions.count() >= 3
        for i in range(solutions.count()):
            body = solutions.nth(i).locator(":scope > :not(.admonition-title)")
            assert not any(body.nth(j).is_visible() for j in range(body.count())), \
                f"{entry}: solution {i + 1} is printed"
        note = solutions.first.locator(".admonition-title .fl-print-only")
        assert note.is_visible() and "left out of the printout" in note.inner_text()
        for i in range(explorers.count()):
            root = explorers.nth(i)
            assert not root.locator(".fl-controls").is_visible()
            img = root.locator("img").first
            assert img.is_visible()
            assert img.get_attribute("src") == img.get_attribute("data-fl-default"), \
                f"{entry}: interactive figure {i + 1} does not print its default frame"
        page.evaluate("window.dispatchEvent(new Event('afterprint'))")
        page.emulate_media(media="screen")
        assert not note.is_visible(), "the print-only note shows on screen"
        assert page.pdf()[:4] == b"%PDF"


def test_print_numbers_the_title_and_breaks_no_frame_from_its_content(site, open_page):
    """In print the title carries the chapter number (sphinx-book-theme prints the page title
    without it and hides the article's h1), and no frame (a border or a background) may break
    across pages around content that does not: the theme keeps code blocks whole, so a code
    cell's frame split from its code and a page ended on an empty frame (ch10 on A4, 2026-12-07:
    13 of 40 printed pages ended or began on an empty frame over 20 px high at 60 dpi, up to 524 px;
    none after)."""
    p = open_page(f"{site}/{CHAPTERS[9]}.html")
    page = p.page
    page.emulate_media(media="print")
    title = page.locator("#jb-print-docs-body > h1")
    assert title.is_visible() and re.match(r"\d+\.\s", title.inner_text()), \
        f"the printed title is {title.inner_text()!r}, without its chapter number"
    split = page.eval_on_selector_all("article *", r"""els => els.filter(e => {
        const s = getComputedStyle(e);
        const framed = parseFloat(s.borderTopWidth) + parseFloat(s.borderLeftWidth) > 0
            || !/rgba\(0, 0, 0, 0\)|transparent/.test(s.backgroundColor);
        if (!framed || s.breakInside === 'avoid' || !e.getBoundingClientRect().height) return false;
        const kids = [...e.children].filter(k => k.getBoundingClientRect().height > 0);
        return kids.length === 1 && getComputedStyle(kids[0]).breakInside === 'avoid';
    }).map(e => e.tagName.toLowerCase() + '.' + e.className).slice(0, 5)""")
    assert not split, f"frames that break apart from their unbreakable content in print: {split}"
    page.emulate_media(media="screen")
    assert not p.errors, p.errors


def _record_and_continue(requests: list, route) -> None:
    requests.append(route.request.url)
    route.continue_()


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280px", "390px"])
def test_no_page_fetches_font_awesome_fonts(site, browser, viewport):
    """No page downloads Font Awesome's web fonts (fa-solid-900 156 KB, fa-brands-400 118 KB:
    every page fetched both until 2026-12-07, for glyphs the inline SVG icons had replaced, an
    exercise title's pencil and the GitHub mark before links to github.com); those two are drawn
    from the same paths as CSS masks, and are shown."""
    for entry in ("book/intro", CHAPTERS[3], "book/bibliography"):
        context = browser.new_context(viewport=viewport, service_workers="block", has_touch=viewport is PHONE)
        try:
            requests: list[str] = []
            context.route("**/*", functools.partial(_record_and_continue, requests))
            page = context.new_page()
            page.goto(f"{site}/{entry}.html", wait_until="load")
            page.wait_for_timeout(300)
            fonts = [u for u in requests if re.search(r"/fa-[a-z]+-\d+\.(woff2?|ttf)", u)]
            assert not fonts, f"{entry}.html fetched {fonts}"
            drawn = page.eval_on_selector_all("article div.exercise > .admonition-title, article a.github", """els =>
                els.map(e => { const s = getComputedStyle(e, e.matches('a') ? '::before' : '::after');
                    return [s.fontFamily.includes('Awesome'), s.maskImage.startsWith('url('), s.width]; })""")
            assert all(not fa and mask and w != "auto" for fa, mask, w in drawn), f"{entry}.html: {drawn[:3]}"
        finally:
            context.close()


def test_icons_are_a_small_inline_set_and_the_favicon_loads(site, open_page):
    """The theme's 1.5 MB fontawesome.js is an empty stub; every icon is an inline SVG hidden from
    screen readers; the favicon is served (no 404)."""
    stub = HTML / "_static" / "scripts" / "fontawesome.js"
    assert stub.stat().st_size < 1_000, f"{stub} is {stub.stat().st_size:,} bytes"
    p = open_page(f"{site}/{CHAPTERS[0]}.html")
    page = p.page
    left = page.eval_on_selector_all("i[class*='fa-'], span[class*='fa-']", "els => els.map(e => e.className)")
    assert not left, f"icons not drawn: {left}"
    icons = page.eval_on_selector_all("svg.fl-icon", """els => els.map(e =>
        [e.getAttribute('aria-hidden'), e.getBoundingClientRect().width > 0 || e.closest('[hidden], .d-none, dialog') !== null])""")
    assert len(icons) >= 8 and all(h == "true" for h, _ in icons)
    assert any(w for _, w in icons)
    favicon = page.locator("link[rel~='icon']").first.get_attribute("href")
    status = page.evaluate("async h => (await fetch(h)).status", favicon)
    assert status == 200, f"favicon {favicon}: HTTP {status}"
    assert not p.errors, p.errors
