"""What the commands tell a user about a log: events out of time order, unseen events (the CLI
flags named, the mapped ones counted per sequence), progress bars that say which run they show."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pandas as pd
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.data import EventOrderWarning, load_event_log
from ldhmm.inference.progress import QUIET_INTERVAL, progress_options

LOG = "user,event,timestamp\nu1,a,3\nu1,b,1\nu2,a,1\nu2,c,2\nu1,c,2\nu3,b,5\nu3,a,6\n"


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(LOG)
    return path


def test_file_order_against_a_time_column_warns(log, tmp_path):
    with pytest.warns(EventOrderWarning, match=r"'timestamp' goes backwards within 1 of 3 sequences"):
        db = load_event_log(log, "user", "event")
    assert db.vocabulary[db.sequences[0][0]] == "a"  # file order kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ordered = load_event_log(log, "user", "event", time_col="timestamp")
        assert [ordered.vocabulary[c] for c in ordered.sequences[0]] == ["b", "c", "a"]
        sorted_log = tmp_path / "sorted.csv"
        sorted_log.write_text("user,event,timestamp\nu1,a,1\nu1,b,2\nu2,a,1\n")
        load_event_log(sorted_log, "user", "event")  # in order: no warning
        no_time = tmp_path / "plain.csv"
        no_time.write_text("user,event,page\nu1,a,3\nu1,b,1\n")
        load_event_log(no_time, "user", "event")  # no time-like column: nothing to say


def test_the_command_names_the_flag_in_one_line(log, tmp_path, capsys):
    argv = ["fit", str(log), "--sequence-col", "user", "--event-col", "event", "--states", "2"]
    argv += ["--max-iter", "2", "--restarts", "1", "--quiet", "--out", str(tmp_path / "m.json")]
    assert main(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(err) == 1 and err[0].startswith("ldhmm fit: warning: ") and "--time-col timestamp" in err[0]
    assert main(argv + ["--time-col", "timestamp"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_unseen_events_name_the_flags_and_are_counted(log, tmp_path, capsys):
    common = ["--sequence-col", "user", "--event-col", "event", "--time-col", "timestamp"]
    fit = ["fit", str(log), *common, "--states", "2", "--max-iter", "2", "--restarts", "1", "--quiet"]
    assert main([*fit, "--out", str(tmp_path / "plain.json")]) == 0
    assert main([*fit, "--unknown", "reserve", "--out", str(tmp_path / "unk.json")]) == 0
    new = tmp_path / "new.csv"
    new.write_text("user,event,timestamp\nv1,zzz,1\nv1,a,2\nv1,yyy,3\nv2,a,1\nv2,b,2\n")
    capsys.readouterr()
    score = ["score", str(tmp_path / "plain.json"), str(new), *common, "--out", str(tmp_path / "s.csv")]
    assert main(score) == 1
    assert "ldhmm fit --unknown reserve" in capsys.readouterr().err
    assert main([*score, "--unknown", "map"]) == 1
    assert "--unknown reserve" in capsys.readouterr().err
    score[1] = str(tmp_path / "unk.json")
    assert main([*score, "--unknown", "map"]) == 0
    assert "2 events in 1 sequences scored as <unk>" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "s.csv")
    assert table["n_unk"].tolist() == [2, 0] and list(table.columns[:2]) == ["sequence_id", "n_unk"]
    score[2] = str(log)  # no unseen event, no --unknown map: the table as before
    assert main(score) == 0
    assert "n_unk" not in pd.read_csv(tmp_path / "s.csv").columns


def test_progress_bars_are_labelled_and_quiet_off_a_terminal(small_db, capsys):
    assert progress_options(io.StringIO())["mininterval"] == QUIET_INTERVAL

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert "mininterval" not in progress_options(Terminal())
    LDHMM(2, seed=0, max_iter=3, n_init=2, verbose=True, effort="thorough").fit(small_db[:20])
    err = capsys.readouterr().err
    assert "variational EM (restart 1 of 2)" in err and "variational EM (restart 2 of 2)" in err
    # off a terminal a bar draws at its start and at most once a minute: not once per iteration
    assert err.count("restart 1 of 2") <= 2
    LDHMM(2, seed=0, max_iter=3, n_init=2, verbose=True).fit(small_db[:20])  # v5: effort "standard"
    err = capsys.readouterr().err
    for label in ("database-level HMM, start 1 of 3", "from the database-level HMM", "symbol-seeded start"):
        assert f"variational EM ({label})" in err, label
    assert np.isfinite(LDHMM(2, seed=0, max_iter=3).fit(small_db[:20]).elbo_history_).all()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["compare", "--file", "LOG", "--data-dir", "DIR"],
            "--data-dir holds the named data sets (--dataset): not",
        ),
        (
            ["classify", "--file", "LOG", "--data-dir", "DIR"],
            "--data-dir holds the named data sets (--dataset): not",
        ),
        (["compare", "--file", "LOG", "--backend", "dask", "--jobs", "2"], "--jobs is for --backend local"),
        (
            ["score", "MODEL", "LOG", "--seed", "5"],
            "--seed seeds the importance samples: it needs --is-samples",
        ),
    ],
)
def test_an_option_the_run_would_not_use_is_refused_in_one_line(log, tmp_path, capsys, argv, message):
    """Not a run without it: the option is named, with what it needs, and nothing is written."""
    LDHMM(2, n_symbols=3, seed=0, max_iter=2).fit([[0, 1, 2], [1, 0]]).save(
        tmp_path / "m.json", vocabulary=["a", "b", "c"]
    )
    columns = ["--sequence-col", "user", "--event-col", "event", "--time-col", "timestamp"]
    given = {"LOG": str(log), "DIR": str(tmp_path), "MODEL": str(tmp_path / "m.json")}
    out = tmp_path / ("s.csv" if argv[0] == "score" else "o")
    assert main([given.get(a, a) for a in argv] + columns + ["--quiet", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not out.exists()


def test_a_setting_of_a_part_the_run_leaves_out_is_refused(log, tmp_path, capsys):
    """``--lr-c`` with ``--no-lr`` (no logistic regression rows to set) and ``--row-group-tokens``
    with the events layout (which plans no row groups by tokens): one line, nothing written."""
    columns = ["--sequence-col", "user", "--event-col", "event", "--time-col", "timestamp"]
    out = tmp_path / "c"
    argv = ["classify", "--file", str(log), *columns, "--label-col", "user", "--no-lr", "--lr-c", "0.5"]
    assert main([*argv, "--quiet", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--lr-c sets the logistic regression rows: not with --no-lr" in err
    argv = ["data", "export", str(log), str(out), *columns, "--layout", "events", "--row-group-tokens", "5"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--row-group-tokens plans the sequences layout's row groups" in err
    assert not out.exists()
