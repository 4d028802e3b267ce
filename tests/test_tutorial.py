"""docs/tutorial-event-log.md is true: its steps run on the log its first step writes, each
output is the page's, and the report it makes renders in a real headless browser.

The page's fenced blocks are the script: ``python title=FILE`` blocks are written to FILE,
``console`` blocks hold ``$ COMMAND`` lines each followed by its output (commands: ``ldhmm``,
run in this process; ``python FILE``; ``head -n N FILE``), and a ``python`` block is run with
its output in the ``text`` block after it. Seconds are masked before comparing, and decimal
numbers may differ by 1e-7 relative, 1e-5 absolute or one unit of their last printed digit:
the fits run the host CPU's own kernels (AVX2 or AVX-512), whose last bits EM grows to ~1e-8
relative in the ELBO and ~6e-7 absolute in predicted probabilities (measured between the two).
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
    """The output without what changes from run to run: seconds (also the seconds column of
    the table of a fit along K: K, three scores, seconds, start)."""
    text = re.sub(r"(?m)^(\s*\d+(?:\s+-?\d+\.\d+){3})\s+\d+\.\d(\s+\S+)$", r"\1 <seconds>\2", text)
    return re.sub(r"\b\d+(\.\d+)? s\b", "<seconds> s", text).rstrip("\n")


# A decimal number standing alone (not part of a version such as 0.2.0 or of a word).
DECIMAL = re.compile(r"(?<![\w.])-?\d+\.(\d+)(?:e([-+]?\d+))?(?![\w.])")


def _same_output(found: str, expected: str) -> bool:
    """Whether two outputs are the same text, decimal numbers up to the machine's last bits
    (1e-7 relative, 1e-5 absolute or one unit of the last printed digit) and runs of spaces
    (an aligned column widens when a number's sign flips)."""
    found, expected = (re.sub(r"[ \t]+", " ", _mask(t)) for t in (found, expected))
    if DECIMAL.sub("#", found) != DECIMAL.sub("#", expected):
        return False
    for f, e in zip(DECIMAL.finditer(found), DECIMAL.finditer(expected), strict=True):
        a, b = float(f.group(0)), float(e.group(0))
        last_digit = 10.0 ** (int(e.group(2) or 0) - len(e.group(1)))
        if abs(a - b) > max(1e-7 * abs(b), 1e-5, 1.01 * last_digit):
            return False
    return True


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


@pytest.mark.parametrize(
    "found, expected, same",
    [
        ("ELBO -2325.150364 (rule", "ELBO -2325.150338 (rule", True),
        ("p 0.3173365443 x", "p 0.3173371405 x", True),
        ("accuracy 0.124", "accuracy 0.123", True),
        ("accuracy 0.125", "accuracy 0.123", False),
        ("p 0.3173 x", "p 0.3174 y", False),
        ("ELBO -2325.17 (rule", "ELBO -2325.15 (rule", False),
        ("ldhmm 0.3.0", "ldhmm 0.2.0", False),
        ("a    0.000 b", "a   -0.000 b", True),
        ("120 users", "121 users", False),
        ("took 3.5 s", "took 12 s", True),
    ],
)
def test_outputs_are_compared_up_to_the_machines_last_bits(found, expected, same):
    assert _same_output(found, expected) is same


def test_every_output_of_the_tutorial_is_real(tutorial):
    _, checks = tutorial
    assert len(checks) >= 7  # the log, fit, report, predict, the Python tables
    for what, expected, found in checks:
        assert _same_output(found, expected), (
            f"the output of {what!r} differs from the page:\n{_mask(found)}\n---\n{_mask(expected)}"
        )


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
    # heat map, diagram, users, two typical and two unusual paths, next-event bars, ELBO, and
    # the ELBO of every start (from the database-level HMM and the symbol-seeded start)
    assert len(widths) == 10 and min(widths) > 50
    # summary, states, top events, initial, transitions, groups, typical, unusual, next event,
    # and every start (a v5 fit ran no random restart: its two runs, the HMM's and the seeded one)
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
    kept = "kept restart\tnone (no random restart ran): the kept run started from the database-level HMM"
    for field in (kept, "training data\ttrain.csv", "training sequences\t120"):
        assert field in text
    assert re.search(r"training data SHA-256\t[0-9a-f]{64}", text)
    assert "from the database-level HMM" in text and "symbol-seeded start" in text


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
    monkeypatch.setitem(globals(), "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="chromium"):
        _browser()
