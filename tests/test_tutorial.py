"""docs/tutorial-event-log.md is true: its steps run on the log its first step writes, each
output is the page's, and the report it makes renders in a real headless browser.

The page's fenced blocks are the script: ``python title=FILE`` blocks are written to FILE,
``console`` blocks hold ``$ COMMAND`` lines each followed by its output (commands: ``ldhmm``,
run in this process; ``python FILE``; ``head -n N FILE``), and a ``python`` block is run with
its output in the ``text`` block after it. Seconds are masked before comparing.
``LDHMM_UPDATE_TUTORIAL=1`` rewrites the outputs of the page and docs/report-screenshot.png.

The browser check needs chromium (Debian's package) and Python's playwright (the ``report``
extra); without them it is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import shutil
from pathlib import Path

import pytest

from ldhmm.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "tutorial-event-log.md"
SCREENSHOT = REPO / "docs" / "report-screenshot.png"
UPDATE = os.environ.get("LDHMM_UPDATE_TUTORIAL") == "1"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BLOCK = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)


def _mask(text: str) -> str:
    """The output without what changes from run to run: seconds."""
    return re.sub(r"\b\d+(\.\d+)? s\b", "<seconds> s", text).rstrip("\n")


def _captured(run) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run()
    return out.getvalue()


def _command(line: str) -> str:
    """The output of one ``$`` line of the page, run in the current directory."""
    argv = shlex.split(line)
    if argv[0] == "ldhmm":
        result = {}
        text = _captured(lambda: result.setdefault("code", main(argv[1:])))
        assert result["code"] == 0, f"{line!r} exited with {result['code']}"
        return text
    if argv[0] == "python" and len(argv) == 2:
        return _captured(lambda: runpy.run_path(argv[1], run_name="__main__"))
    if argv[:2] == ["head", "-n"] and len(argv) == 4:
        with open(argv[3], encoding="utf-8") as f:
            return "".join(f.readlines()[: int(argv[2])])
    raise AssertionError(f"the tutorial runs ldhmm, python FILE and head -n N FILE, not {line!r}")


def _console(body: str) -> list[tuple[str, str]]:
    """``(command, output)`` of each ``$`` line of a console block."""
    steps = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(c, "\n".join(o)) for c, o in steps]


def _run_page(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """Run the page in the current directory: the page with the outputs found, and the
    (what, expected, found) of every output."""
    blocks = list(BLOCK.finditer(text))
    pieces, checks, last = [], [], 0
    pending = None  # the output of a python block, for the text block after it
    for match in blocks:
        lang, info, body = match.group(1), match.group(2), match.group(3)
        new = body
        if lang == "python" and "title=" in info:
            Path(info.split("title=")[1].strip()).write_text(body, encoding="utf-8")
        elif lang == "python":
            pending = _captured(lambda b=body: exec(compile(b, "tutorial", "exec"), {"__name__": "__main__"}))
        elif lang == "text" and pending is not None:
            checks.append(("python block", body, pending))
            new, pending = pending, None
        elif lang == "console":
            lines = []
            for command, expected in _console(body):
                found = _command(command)
                checks.append((command, expected, found))
                lines += [f"$ {command}", *found.rstrip("\n").splitlines()]
            new = "\n".join(lines) + "\n"
        pieces += [text[last : match.start(3)], new]
        last = match.end(3)
    return "".join(pieces) + text[last:], checks


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """The tutorial run in a fresh directory: (directory, page with the outputs found, checks)."""
    where = tmp_path_factory.mktemp("tutorial")
    here = os.getcwd()
    os.chdir(where)
    try:
        page, checks = _run_page(PAGE.read_text(encoding="utf-8"))
    finally:
        os.chdir(here)
    if UPDATE:
        PAGE.write_text(page, encoding="utf-8")
    return where, checks


def test_every_output_of_the_tutorial_is_real(tutorial):
    _, checks = tutorial
    assert len(checks) >= 7  # the log, fit, report, predict, the Python tables
    for what, expected, found in checks:
        assert _mask(found) == _mask(expected), f"the output of {what!r} differs from the page"


def _browser():
    """playwright's sync API and the chromium binary, or a skip (a failure under CI=true)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = [
        what
        for what, ok in (
            ("pip install -e '.[report]' (playwright)", sync_playwright),
            ("chromium", shutil.which(CHROMIUM)),
        )
        if not ok
    ]
    if missing:
        message = f"the browser test needs {' and '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


def test_the_report_renders_in_a_headless_browser(tutorial, tmp_path):
    sync_playwright = _browser()
    where, _ = tutorial
    report = where / "report.html"
    url = report.as_uri()
    errors, requests = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
            page.goto(url, wait_until="load")
            figures = page.locator("figure > svg")
            widths = figures.evaluate_all("els => els.map(e => e.getBoundingClientRect().width)")
            tables = page.locator("table").count()
            rows = page.locator("tbody tr").count()
            text = page.inner_text("body")
            scripts = page.locator("script").count()
            page.screenshot(path=str(SCREENSHOT if UPDATE else tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert requests == [url] and errors == [] and scripts == 0
    # heat map, diagram, users, two typical and two unusual paths, next-event bars, ELBO
    assert len(widths) == 9 and min(widths) > 50
    # summary, states, top events, initial, transitions, groups, typical, unusual, next event,
    # restarts
    assert tables == 10 and rows > 40
    for heading in (
        "States",
        "Initial and transition structure",
        "Users",
        "Next-event prediction",
        "The fit",
    ):
        assert heading in text
    assert "Q&A" in text and "MARKOV1" in text
    # the fit's history per restart and the data it was fitted on
    for field in ("kept restart\t1 of 1", "training data\ttrain.csv", "training sequences\t120"):
        assert field in text
    assert re.search(r"training data SHA-256\t[0-9a-f]{64}", text)
    assert "Restarts (the fit keeps the highest final ELBO)" in text


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
    monkeypatch.setitem(globals(), "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="chromium"):
        _browser()
