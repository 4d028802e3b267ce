"""An event log's class column (``label_col``, ``--label-col``): one label per sequence, read by
every command that reads a log, so that ``ldhmm classify`` takes a user's own labelled log."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ldhmm.cli import main
from ldhmm.data import DataFormatError, DataOptions, load_event_log


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """60 users of two classes with different event frequencies, rows shuffled across users."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(60):
        group = "buyer" if u % 3 else "browser"
        p = [0.6, 0.2, 0.1, 0.1] if group == "buyer" else [0.1, 0.1, 0.2, 0.6]
        rows += [(f"u{u}", "abcd"[rng.choice(4, p=p)], t, group) for t in range(int(rng.integers(5, 15)))]
    frame = pd.DataFrame(rows, columns=["user", "event", "t", "group"]).sample(frac=1.0, random_state=0)
    path = tmp_path_factory.mktemp("labels") / "log.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_each_sequence_gets_its_rows_label(log):
    path, frame = log
    db = load_event_log(path, "user", "event", "t", label_col="group")
    assert db.label_names == ["browser", "buyer"]
    truth = frame.groupby("user")["group"].first()
    assert [db.label_names[k] for k in db.labels] == [truth[i] for i in db.ids]
    same = DataOptions(sequence_col="user", event_col="event", time_col="t", label_col="group").read(path)
    np.testing.assert_array_equal(same.labels, db.labels)


def test_a_sequence_with_two_labels_names_the_line(log, tmp_path):
    path, frame = log
    bad = frame.copy()
    first = bad.index[bad["user"] == "u0"]
    bad.loc[first[-1], "group"] = "buyer"  # u0 is a browser
    bad.to_csv(tmp_path / "bad.csv", index=False)
    line = int(np.flatnonzero(bad.index == first[-1])[0]) + 2
    with pytest.raises(DataFormatError, match=rf"bad.csv:{line}: sequence 'u0' has label 'buyer' here"):
        load_event_log(tmp_path / "bad.csv", "user", "event", "t", label_col="group")


def test_classify_takes_a_labelled_log(log, tmp_path, capsys):
    path, _ = log
    argv = ["classify", "--file", str(path), "--sequence-col", "user", "--event-col", "event"]
    argv += ["--time-col", "t", "--label-col", "group", "--states", "2", "--folds", "3"]
    argv += ["--models", "HMM", "--no-lr", "--quiet", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    folds = pd.read_csv(tmp_path / "out" / "folds.csv")
    assert set(folds["task"]) == {"browser-buyer"} and len(folds) == 3
    assert folds["auc"].between(0.5, 1.0).all()  # the classes differ in their event frequencies
    assert main([*argv[:9], "--states", "2", "--out", str(tmp_path / "o2")]) != 0
    assert "needs a labelled database" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("command", ["fit", "score", "compare"])
def test_a_command_that_reads_no_classes_refuses_the_label_column(log, tmp_path, capsys, command):
    """Not read and dropped: one line naming the commands that read classes, nothing written."""
    path, _ = log
    columns = ["--sequence-col", "user", "--event-col", "event", "--label-col", "group"]
    out = tmp_path / "o"
    argv = {
        "fit": ["fit", str(path), "--states", "2", "--out", str(out)],
        "score": ["score", str(tmp_path / "m.json"), str(path), "--out", str(out)],
        "compare": ["compare", "--file", str(path), "--models", "HMM", "--out", str(out)],
    }[command]
    assert main([*argv, *columns]) == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--label-col: this command does not read classes" in err and "ldhmm classify" in err
