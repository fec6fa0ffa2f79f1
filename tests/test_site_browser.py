"""The built site, checked page by page in a real browser (headless Chromium driven by Selenium).

Every page of the table of contents is opened at desktop (1280 px) and phone (390 px) width from a
local server, and the test fails on: console errors; math MathJax did not typeset; images that did not
load; stray outputs (empty output boxes, bare object reprs); any element that makes the page scroll
sideways; at desktop, code, equations and tables wider than the text column; images without a caption
or without alt text that describes them; Colab links that do not open the page's own notebook (a
chapter's reader notebook in book/colab/, an exercise's released notebook); more than one search
field; a heading shown twice. Messages name the page and the element. Screenshots of the intro, one
chapter and one exercise go to _build/screenshots/.

Debian's chromium and chromium-driver are installed with apt-get when missing and possible (root);
otherwise the tests are skipped with the reason. tests/conftest.py starts that install in the
background while the other tests run.
"""

from __future__ import annotations

import functools
import http.server
import pathlib
import re
import tempfile
import threading

import pytest
import yaml

from conftest import chromium_ready, wait_for_book_build
from setup_cell import ROOT, repo_branch, repo_url

HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


def toc_pages() -> list[str]:
    """Every page of the book, as paths without suffix, in table-of-contents order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries:
            pages.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc["parts"]:
        walk(part["chapters"])
    return pages


PAGES = toc_pages()
CHAPTERS = [p for p in PAGES if re.fullmatch(r"book/\d\d_\w+", p)]
EXERCISES = [p for p in PAGES if p.startswith("exercises/release/")]
SCREENSHOT_PAGES = {PAGES[0]: "intro", (CHAPTERS or PAGES)[min(2, len(CHAPTERS) - 1)]: "chapter",
                    (EXERCISES or PAGES)[min(4, len(EXERCISES) - 1)]: "exercise"}


def expected_notebook(page: str) -> str | None:
    """The notebook a page's Colab button must open (repository path), or None for a plain page."""
    if page in CHAPTERS:
        return f"book/colab/{page.removeprefix('book/')}.ipynb"
    if page in EXERCISES:
        return f"{page}.ipynb"
    return None


# ----------------------------------------------------------------------------------- browser set-up


@pytest.fixture(scope="module")
def site():
    """The built site on a local HTTP server (after the book build of this session succeeded)."""
    code, log = wait_for_book_build()
    assert code == 0, f"the book build failed, so the site cannot be checked:\n{log[-3000:]}"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=HTML))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    ready, reason = chromium_ready()
    if not ready:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = ready["chromium"]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
    options.add_argument(f"--user-data-dir={profile.name}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(ready["chromedriver"]), options=options)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    profile.cleanup()


# ------------------------------------------------------------------------------- what a page shows

WAIT_FOR_MATH = """
const done = arguments[arguments.length - 1];
const settle = () => setTimeout(() => done(true), 50);
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  MathJax.startup.promise.then(settle, () => done(false));
} else { settle(); }
"""

INSPECT = r"""
const desktop = arguments[0];
const article = document.querySelector('article.bd-article') || document.body;
const vw = document.documentElement.clientWidth;
const problems = [];
const visible = el => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
const heading = el => { let h = null; const all = article.querySelectorAll('h1,h2,h3,h4');
  for (const x of all) { if (x.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) h = x; }
  return h ? h.textContent.replace(/[#¶]/g, '').trim().slice(0, 60) : '(top of page)'; };
const describe = el => {
  const cls = (el.className && el.className.baseVal === undefined) ? '.' + String(el.className).trim().split(/\s+/).slice(0, 2).join('.') : '';
  const text = (el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 70);
  return `<${el.tagName.toLowerCase()}${cls}> under "${heading(el)}": "${text}"`; };
const mathSource = el => { try { const items = MathJax.startup.document.getMathItemsWithin(el);
  return items.length ? items[0].math.trim().replace(/\s+/g, ' ').slice(0, 90) : ''; } catch (e) { return ''; } };
const scrolls = el => { for (let a = el.parentElement; a; a = a.parentElement) {
  const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return a; } return null; };

// 1. the page must not scroll sideways; name the elements that stick out of the viewport
if (document.documentElement.scrollWidth > vw + 1) {
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (!visible(el) || el.closest('mjx-assistive-mml')) continue;  // MathJax's copy for screen readers
    const r = el.getBoundingClientRect();
    const box = scrolls(el);
    if (r.right > vw + 1 && (!box || box === document.documentElement || box === document.body
        || box.getBoundingClientRect().right > vw + 1)) {
      if (!el.parentElement || el.parentElement.getBoundingClientRect().right <= vw + 1 || wide.length === 0) wide.push(el);
    }
  }
  const named = wide.filter(el => !wide.some(o => o !== el && o.contains(el))).slice(0, 5);
  problems.push(`the page scrolls sideways (${document.documentElement.scrollWidth} px wide in a ${vw} px window): `
    + named.map(el => `${describe(el)} ends at ${Math.round(el.getBoundingClientRect().right)} px`).join('; '));
}
// 2. at desktop width, code, equations and tables fit the column (they scroll in their box otherwise)
if (desktop) {
  for (const pre of article.querySelectorAll('div.highlight pre, .cell_output pre')) {
    if (pre.scrollWidth > pre.clientWidth + 1) {
      const longest = pre.textContent.split('\n').reduce((a, b) => b.length > a.length ? b : a, '');
      problems.push(`code wider than the column (${longest.length} characters; ${pre.scrollWidth} > ${pre.clientWidth} px) under "${heading(pre)}": "${longest.trim().slice(0, 80)}"`);
    }
  }
  for (const m of article.querySelectorAll('mjx-container[display="true"]')) {
    if (m.scrollWidth > m.clientWidth + 1)
      problems.push(`equation wider than the column (${m.scrollWidth} > ${m.clientWidth} px) under "${heading(m)}": $$ ${mathSource(m)} $$`);
  }
  for (const t of article.querySelectorAll('.pst-scrollable-table-container, .cell_output .output')) {
    if (t.scrollWidth > t.clientWidth + 1) problems.push(`wider than the column (${t.scrollWidth} > ${t.clientWidth} px): ${describe(t)}`);
  }
}
// 3. math typeset: no TeX errors and no raw delimiters left in the text
for (const e of article.querySelectorAll('mjx-merror')) problems.push(`a TeX error in ${describe(e.closest('mjx-container') || e)}`);
const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT, { acceptNode: n => {
  const p = n.parentElement; return p.closest('pre, code, script, style, mjx-container, textarea, .highlight')
    ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT; } });
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const m = n.textContent.match(/\$\$|\\\(|\\\[|\\begin\{|\$[^$\s][^$]*\$/);
  if (m) problems.push(`math not typeset under "${heading(n.parentElement)}": "${n.textContent.trim().slice(0, 80)}"`);
}
// 4. images load, and every image is a figure with a caption and alt text that describes it
article.querySelectorAll('img').forEach((img, i) => {
  const where = `image ${i + 1} under "${heading(img)}"`;
  if (!img.complete || img.naturalWidth === 0) problems.push(`${where} did not load: ${img.getAttribute('src').slice(0, 80)}`);
  const alt = (img.getAttribute('alt') || '').trim();
  if (alt.length < 10 || /\.(png|svg|jpe?g|gif)$/i.test(alt) || alt.includes('_images/'))
    problems.push(`${where} has no descriptive alt text (alt="${alt.slice(0, 60)}")`);
  const fig = img.closest('figure');
  const cap = fig && fig.querySelector('figcaption');
  if (!cap || !cap.textContent.trim()) problems.push(`${where} has no caption (show it with course_lib.notebook.show_figure)`);
});
// 5. stray outputs: empty output boxes and bare object reprs
for (const out of article.querySelectorAll('.cell_output')) {
  const text = (out.innerText || '').trim();
  if (!text && !out.querySelector('img, svg, figure, table, iframe, canvas'))
    problems.push(`an empty output box under "${heading(out)}"`);
  else if (/^(<[\w.]+( object)? at 0x[0-9a-f]+>|Text\(|\[<matplotlib|<Figure size|<matplotlib\.)/.test(text))
    problems.push(`a stray output under "${heading(out)}": "${text.slice(0, 60)}"`);
}
// 6. one search field, each heading once
const search = [...document.querySelectorAll('.search-button-field, .search-button, form.bd-search input[type=search]')]
  .filter(el => visible(el) && !el.closest('dialog'));
if (search.length !== 1) problems.push(`${search.length} search fields visible (one expected): ${search.map(describe).join('; ')}`);
const seen = {};
for (const h of [...article.querySelectorAll('h1, h2, h3, p.caption')]) {
  const t = h.textContent.replace(/[#¶]/g, '').trim();
  if (t && seen[t] && !h.closest('.toctree-wrapper li li')) problems.push(`the heading "${t}" is shown twice`);
  seen[t] = true;
}
// 7. Colab links
const colab = [...document.querySelectorAll('a[href*="colab.research.google.com"]')].map(a => ({
  href: a.href, header: !!a.closest('.bd-header-article, .article-header-buttons, .dropdown-launch-buttons')}));
return {problems: problems, colab: colab};
"""


def console_errors(driver) -> list[str]:
    return [entry["message"][:300] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def colab_problems(page: str, links: list[dict]) -> list[str]:
    owner_repo = repo_url().removeprefix("https://github.com/")
    prefix = f"https://colab.research.google.com/github/{owner_repo}/blob/{repo_branch()}/"
    problems = []
    own = expected_notebook(page)
    header = [link["href"] for link in links if link["header"]]
    if own is not None and header != [prefix + own]:
        problems.append(f"the launch button opens {header or 'nothing'}, not {prefix + own}")
    if own is None and header:
        problems.append(f"a page without a notebook has a Colab button: {header}")
    for link in links:
        target = link["href"].removeprefix(prefix)
        if not link["href"].startswith(prefix) or not (ROOT / target).is_file():
            problems.append(f"a Colab link to a notebook that is not in the repository: {link['href']}")
        elif not (target.startswith("book/colab/") or target.startswith("exercises/release/")):
            problems.append(f"a Colab link to {target}, not to a reader notebook (book/colab/) or a "
                            f"released exercise")
    return problems


def inspect(driver, site: str, page: str, width: str) -> list[str]:
    driver.set_window_size(*WIDTHS[width])
    driver.get_log("browser")  # discard what an earlier page left
    driver.get(f"{site}/{page}.html")
    if not driver.execute_async_script(WAIT_FOR_MATH):
        return ["MathJax failed to start"]
    found = driver.execute_script(INSPECT, width == "desktop")
    problems = found["problems"] + [f"console error: {m}" for m in console_errors(driver)]
    if width == "desktop":
        problems += colab_problems(page, found["colab"])
    return [f"{page}.html at {WIDTHS[width][0]} px: {p}" for p in problems]


@pytest.mark.parametrize("page", PAGES)
def test_page_in_the_browser(site, browser, page):
    assert (HTML / f"{page}.html").is_file(), f"{page}.html was not built"
    problems = inspect(browser, site, page, "desktop") + inspect(browser, site, page, "phone")
    assert problems == [], "\n".join(problems)


def test_every_kind_of_page_is_checked():
    assert PAGES[0] == "book/intro" and CHAPTERS and EXERCISES and "book/api" in PAGES


def test_screenshots(site, browser):
    """The intro, a chapter and an exercise at both widths, saved for people to look at."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page, name in SCREENSHOT_PAGES.items():
        for width, size in WIDTHS.items():
            browser.set_window_size(*size)
            browser.get(f"{site}/{page}.html")
            assert browser.execute_async_script(WAIT_FOR_MATH), f"{page}: MathJax failed to start"
            path = SCREENSHOTS / f"{name}-{width}.png"
            assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000, path
