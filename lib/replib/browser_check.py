"""The built book, checked in a real browser: headless Chromium (Debian's package) driven by Playwright.

Every HTML page of a build is served from 127.0.0.1, with every other request blocked, and must
show: no console error and no script error, no failed local resource, every image loaded, math
typeset wherever the page has math, no Colab set-up cell, no path of the machine that built it (a
leaked warning), and, on notebook pages, a Colab launch link to that very notebook. On the scoreboard, each table's verdict column must lie inside a
1280 px wide window. `make test` runs it after the smoke build (:func:`replib.book.smoke`); where
Chromium or Playwright is missing it prints why and checks nothing.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

from .core.colab import FIRST_LINE

CHROMIUM_NAMES = ("chromium", "chromium-browser")
SKIPPED_PAGES = ("genindex.html", "search.html")  # Sphinx's own; redirect pages are skipped too
VIEWPORT = {"width": 1280, "height": 900}


def chromium_path() -> str | None:
    """The system Chromium, or None."""
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def missing_requirement() -> str | None:
    """Why the check cannot run here (no Chromium, no Playwright), or None when it can."""
    if chromium_path() is None:
        return "Chromium is not installed (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (it is in the test extra: pip install -e '.[test]')"
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    """The page server: a browser closing a connection mid-transfer (it often does when a page is
    closed) is not a problem of the book, so it prints no traceback."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


# What one loaded page shows, read after MathJax (if the page loads it) has finished typesetting.
PAGE_SCRIPT = """async () => {
      if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
      const images = [...document.images].filter(img => !img.complete || img.naturalWidth === 0)
                                         .map(img => img.getAttribute('src'));
      const maths = [...document.querySelectorAll('.math')];
      const untypeset = maths.filter(el => !el.querySelector('mjx-container')).length;
      const merrors = [...document.querySelectorAll('mjx-merror')]
                      .map(el => el.getAttribute('data-mjx-error') || el.textContent.trim());
      const colab = [...document.querySelectorAll('a[href*="colab.research.google.com"]')]
                    .map(a => a.getAttribute('href'));
      const verdicts = [...document.querySelectorAll('table')].map(table => {
        const heads = [...table.querySelectorAll('thead th')].map(th => th.textContent.trim().toLowerCase());
        const i = heads.findIndex(h => ['verdict', 'headline'].includes(h));
        if (i < 0) return null;
        const r = table.querySelectorAll('thead th')[i].getBoundingClientRect();
        let clip = window.innerWidth;  // the right edge of what is visible: the window, or a clipping box
        for (let el = table; el; el = el.parentElement) {
          if (getComputedStyle(el).overflowX !== 'visible') clip = Math.min(clip, el.getBoundingClientRect().right);
        }
        return {header: heads[i], right: r.right, width: r.width, clip};
      }).filter(x => x);
      return {images, maths: maths.length, untypeset, merrors, colab, verdicts,
              text: document.body.innerText};
    }"""


def machine_paths() -> tuple[str, ...]:
    """Paths of the machine that built the book (the checkout, the environment, home): text with one
    of them on a page is a leaked warning or traceback, meaningless to a reader."""
    import sys

    from .core.paths import repo_root

    paths = {str(Path.home()) + "/", sys.prefix + "/"}
    if repo_root() is not None:
        paths.add(str(repo_root()) + "/")
    return tuple(sorted(p for p in paths if len(p) > 2))


def check_page(page, url: str, rel: str) -> list[str]:
    """Open one page and return its problems (empty when it passes)."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed local request: {r.url}")
            if urlparse(r.url).hostname == "127.0.0.1" else None)
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="load")
    seen = page.evaluate(PAGE_SCRIPT)
    problems += [f"image not loaded: {src}" for src in seen["images"]]
    if seen["untypeset"]:
        problems.append(f"{seen['untypeset']} of {seen['maths']} formulas not typeset by MathJax")
    problems += [f"a formula does not parse: {error}" for error in seen["merrors"]]
    if FIRST_LINE in seen["text"]:
        problems.append("the Colab set-up cell is shown")
    problems += [f"a machine's path reaches the page: {line.strip()[:120]}" for line in seen["text"].splitlines()
                 if any(marker in line for marker in machine_paths())]
    parts = Path(rel).with_suffix(".ipynb").parts
    if len(parts) == 3 and parts[0] == "notebooks":
        wanted = "/" + "/".join(parts)
        if not any(href.endswith(wanted) for href in seen["colab"]):
            problems.append(f"no Colab launch link to {wanted} (found {seen['colab']})")
    if Path(rel).name == "scoreboard.html":
        if not seen["verdicts"]:
            problems.append("the scoreboard has no table with a verdict column")
        problems += [f"the {v['header']} column ends at {v['right']:.0f} px, past the visible edge at "
                     f"{v['clip']:.0f} px of a {VIEWPORT['width']} px window" for v in seen["verdicts"]
                     if v["right"] > v["clip"] or v["width"] <= 0]
    return problems


def check_book(html_dir: Path) -> dict[str, list[str]]:
    """Every page of the build at `html_dir` in headless Chromium: page -> its problems."""
    from playwright.sync_api import sync_playwright

    html_dir = Path(html_dir)
    pages = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                   if p.name not in SKIPPED_PAGES and "_static" not in p.parts and "_sources" not in p.parts
                   and 'http-equiv="refresh"' not in p.read_text(encoding="utf-8", errors="replace")[:2000].lower())
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    report: dict[str, list[str]] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
            context = browser.new_context(viewport=VIEWPORT)
            blocked: list[str] = []

            def only_local(route):
                if urlparse(route.request.url).hostname == "127.0.0.1":
                    route.continue_()
                else:
                    blocked.append(route.request.url)
                    route.abort()

            context.route("**/*", only_local)
            for rel in pages:
                page = context.new_page()
                report[rel] = check_page(page, f"{base}/{rel}", rel)
                report[rel] += [f"network request blocked: {u}" for u in blocked]
                blocked.clear()
                page.close()
            browser.close()
    finally:
        server.shutdown()
    return report


def run(html_dir: Path) -> None:
    """The check as `make test` runs it: prints a line per page with problems and fails if any;
    prints why and returns when Chromium or Playwright is missing."""
    reason = missing_requirement()
    if reason:
        print(f"browser check skipped: {reason}")
        return
    report = check_book(html_dir)
    bad = {page: problems for page, problems in report.items() if problems}
    for page, problems in bad.items():
        print(f"{page}:\n  " + "\n  ".join(problems))
    if bad:
        raise SystemExit(f"browser check: {len(bad)} of {len(report)} pages have problems (listed above)")
    print(f"browser check: all {len(report)} pages pass in headless Chromium with the network blocked")
