"""The data options every command that reads a log takes (``ldhmm.cli.data_options`` over
``ldhmm.data.DataOptions``): columns, separator, event map and filter, length limits; the same
messages in every command. The selection is checked against a plain-Python reading of the log."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ldhmm.cli import main
from ldhmm.data import DataFormatError, DataOptions, SequenceDatabase, read_event_map, select_events

EVENTS = ("view", "cart", "buy", "search", "home")
MAP = {"cart": "buy", "search": "view"}  # two raw names merged into each of two names
KEEP = ("view", "buy")


def make_rows(seed=0, users=40):
    """(user, event, time) rows of a click log, in a shuffled file order."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(users):
        for i in range(int(rng.integers(2, 12))):
            rows.append((f"u{u:02d}", EVENTS[int(rng.integers(len(EVENTS)))], 10 * i + u))
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def expected(rows, mapping=None, keep=None, min_length=None, max_length=None):
    """``{user: [events]}``, the selection done by hand: ordered by time, renamed, filtered,
    empty and out-of-range sequences dropped (users in order of first appearance)."""
    users = {}
    for user, event, t in rows:
        users.setdefault(user, []).append((t, event))
    out = {}
    for user, events in users.items():
        names = [(mapping or {}).get(e, e) for _, e in sorted(events)]
        names = [e for e in names if keep is None or e in keep]
        if names and (min_length or 1) <= len(names) <= (max_length or len(names)):
            out[user] = names
    return out


def as_dict(db: SequenceDatabase) -> dict:
    return {i: [db.vocabulary[c] for c in seq] for i, seq in zip(db.ids, db.sequences)}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The same log as CSV, TSV and ';'-separated CSV, an event map, and a small fitted model."""
    d = tmp_path_factory.mktemp("logs")
    rows = make_rows()
    for name, sep in (("shop.csv", ","), ("shop.tsv", "\t"), ("semi.csv", ";")):
        lines = [sep.join(("user_id", "event", "timestamp"))] + [sep.join(map(str, r)) for r in rows]
        (d / name).write_text("\n".join(lines) + "\n")
    (d / "map.csv").write_text("# raw,name\ncart,buy\n\nsearch , view\n")
    cols = ["--sequence-col", "user_id", "--event-col", "event", "--time-col", "timestamp"]
    fit = ["fit", str(d / "shop.csv"), *cols, "--states", "2", "--max-iter", "2", "--restarts", "1"]
    assert main([*fit, "--quiet", "--out", str(d / "model.json")]) == 0
    return d, rows, cols


def test_selection_matches_a_reading_by_hand(logs):
    d, rows, _ = logs
    options = DataOptions(
        "user_id", "event", "timestamp", event_map=MAP, events=KEEP, min_length=3, max_length=8
    )
    db = options.read(d / "shop.csv")
    want = expected(rows, MAP, KEEP, 3, 8)
    assert as_dict(db) == want and db.vocabulary == ["buy", "view"]  # the order of the first raw names
    whole = DataOptions("user_id", "event", "timestamp").read(d / "shop.csv")
    assert as_dict(whole) == expected(rows) and not DataOptions().selects
    assert select_events(whole) is whole  # nothing selected: the database itself
    mapped = select_events(whole, mapping=MAP)
    assert as_dict(mapped) == expected(rows, MAP) and sorted(mapped.vocabulary) == ["buy", "home", "view"]
    assert read_event_map(d / "map.csv") == MAP


def test_labels_follow_the_selected_sequences():
    db = SequenceDatabase.from_sequences(
        [np.array([0, 1]), np.array([2, 2]), np.array([1, 2, 0])],
        ["a", "b", "c"],
        labels=[0, 1, 1],
        label_names=["x", "y"],
        ids=["s0", "s1", "s2"],
    )
    out = select_events(db, keep=["a", "b"])
    assert out.ids == ["s0", "s2"] and out.labels.tolist() == [0, 1] and out.vocabulary == ["a", "b"]
    assert [s.tolist() for s in out.sequences] == [[0, 1], [1, 0]]


@pytest.mark.parametrize("name, sep", [("shop.tsv", None), ("semi.csv", ";"), ("shop.csv", None)])
def test_separators_read_the_same_log(logs, name, sep):
    d, rows, _ = logs
    db = DataOptions("user_id", "event", "timestamp", sep=sep).read(d / name)
    assert as_dict(db) == expected(rows)


def test_a_wrong_separator_is_named(logs):
    d, _, _ = logs
    with pytest.raises(
        DataFormatError,
        match=r"columns: user_id;event;timestamp \(read with separator ','; "
        r"it seems to use ';': pass --sep ';'\)",
    ):
        DataOptions("user_id", "event").read(d / "semi.csv")


def command_lines(d, cols):
    """Every command that reads a log, as argv ending where the data options go."""
    model = str(d / "model.json")
    out = d / "out"
    return {
        "fit": [
            "fit",
            "{log}",
            "--states",
            "2",
            "--max-iter",
            "2",
            "--restarts",
            "1",
            "--quiet",
            "--out",
            str(d / "refit.json"),
        ],
        "score": ["score", model, "{log}", "--quiet", "--out", str(d / "s.csv")],
        "posterior": ["posterior", model, "{log}", "--quiet", "--out", str(d / "p.parquet")],
        "predict": ["predict", model, "{log}", "--quiet", "--out", str(d / "n.csv")],
        "decode": ["decode", model, "{log}", "--quiet", "--out", str(d / "d.csv")],
        "compare": [
            "compare",
            "--file",
            "{log}",
            "--models",
            "MARKOV1",
            "--states",
            "2",
            "--folds",
            "2",
            "--is-samples",
            "0",
            "--quiet",
            "--out",
            str(out / "compare"),
        ],
        "classify": [
            "classify",
            "--file",
            "{log}",
            "--models",
            "MARKOV1",
            "--states",
            "2",
            "--folds",
            "2",
            "--quiet",
            "--out",
            str(out / "classify"),
        ],
        "next-event": [
            "next-event",
            "--file",
            "{log}",
            "--models",
            "MARKOV1",
            "--states",
            "2",
            "--folds",
            "2",
            "--quiet",
            "--out",
            str(out / "next"),
        ],
        "data export": ["data", "export", "{log}", str(out / "export"), "--quiet", "--overwrite"],
        "data info": ["data", "info", "{log}"],
    }


def run(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_command_says_the_same_about_a_missing_column(logs, capsys):
    d, _, _ = logs
    log = d / "semi.csv"
    problem = (
        f"{log}: missing sequence column 'user', event column 'event'; the file has columns: "
        "user_id;event;timestamp (read with separator ','; it seems to use ';': pass --sep ';')"
    )
    for command, argv in command_lines(d, []).items():
        argv = [str(log) if a == "{log}" else a for a in argv]
        code, _, err = run([*argv, "--sequence-col", "user", "--event-col", "event"], capsys)
        prefix = "ldhmm data" if command.startswith("data") else f"ldhmm {command}"
        assert (code, err) == (1, f"{prefix}: error: {problem}\n"), command


def test_every_command_runs_with_the_options(logs, capsys):
    d, rows, cols = logs
    options = [
        "--sep",
        ";",
        "--event-map",
        str(d / "map.csv"),
        "--events",
        ",".join(KEEP),
        "--min-length",
        "3",
    ]
    want = expected(rows, MAP, KEEP, 3)
    lines = command_lines(d, cols)
    fit = [str(d / "semi.csv") if a == "{log}" else a for a in lines.pop("fit")]
    assert run([*fit, *cols, *options], capsys)[0] == 0
    for command in ("score", "posterior", "predict", "decode"):
        argv = [str(d / "semi.csv") if a == "{log}" else a for a in lines.pop(command)]
        argv[1] = str(d / "refit.json")  # the model of the selected events: no unseen symbol
        code, out, err = run([*argv, *cols, *options], capsys)
        assert code == 0, err
        table_path = next(a for a in argv[::-1] if a.endswith((".csv", ".parquet")))
        table = pd.read_parquet(table_path) if table_path.endswith("parquet") else pd.read_csv(table_path)
        assert table["sequence_id"].astype(str).tolist() == list(want), command
    lines.pop("classify")  # needs labels: its missing-column message is checked above
    for command, argv in lines.items():
        argv = [str(d / "semi.csv") if a == "{log}" else a for a in argv]
        code, out, err = run([*argv, *cols, *options], capsys)
        assert code == 0, (command, err)
    folds = pd.read_csv(d / "out" / "next" / "folds.csv")
    assert folds["n_test"].sum() == len(want)
    assert f"{len(want)} sequences" in run(["data", "info", d / "semi.csv", *cols, *options], capsys)[1]


def test_a_shuffled_log_without_a_time_column_still_warns(logs, capsys):
    d, _, _ = logs
    argv = ["score", d / "model.json", d / "shop.tsv", "--sequence-col", "user_id", "--event-col", "event"]
    code, _, err = run([*argv, "--quiet", "--out", d / "w.csv"], capsys)
    assert code == 0 and err.startswith("ldhmm score: warning: ") and "--time-col timestamp" in err


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--sep", "ab"], 2, "argument --sep: expected one character (or 'tab')"),
        (["--events", "view,,buy"], 2, "argument --events: expected NAME,NAME,... without empty names"),
        (["--min-length", "0"], 2, "argument --min-length: must be >= 1, got 0"),
        (["--min-length", "5", "--max-length", "3"], 1, "--min-length 5 is larger than --max-length 3"),
        (["--events", "view,nope"], 1, "event(s) 'nope' to keep (events, --events) not in the data"),
        (["--min-length", "50"], 1, "no sequence has a length in 50..inf"),
        (["--event-map", "{bad}"], 1, "bad.csv:2: expected RAW,NAME"),
    ],
)
def test_bad_options_are_one_line(logs, capsys, extra, code, message):
    d, _, cols = logs
    (d / "bad.csv").write_text("a,b\nc\n")
    extra = [str(d / "bad.csv") if a == "{bad}" else a for a in extra]
    argv = ["score", d / "model.json", d / "shop.csv", *cols, "--quiet", "--out", d / "b.csv", *extra]
    got, _, err = run(argv, capsys)
    assert got == code and message in err and err.count("\n") == 1


def test_options_of_a_file_are_refused_for_a_data_set(logs, capsys):
    d, _, _ = logs
    argv = ["next-event", "--dataset", "synthetic", "--min-length", "3", "--out", d / "x"]
    code, _, err = run(argv, capsys)
    assert (
        code == 1
        and err
        == "ldhmm next-event: error: --min-length applies to a data file, not to --dataset synthetic\n"
    )
