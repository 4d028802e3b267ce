"""Inputs checked at the door (issue 49): times beyond the nanosecond range sort where they
belong, times with UTC offsets are compared in UTC (a mix of times with and without one is one
line naming the line), nested Parquet columns and list-valued ids are refused by name, control
characters in an event log's values are refused as the text loader refuses them, a real event
named ``<unk>`` is one line saying how to rename it, and every error line shows a user's string
with its control characters escaped."""

from __future__ import annotations

import pandas as pd
import pytest

from ldhmm.cli import main
from ldhmm.data import DataFormatError, load_event_log, load_text
from ldhmm.data.terminal_text import shown


def _csv(tmp_path, text, name="log.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_time_in_year_9999_sorts_last_not_first(tmp_path):
    path = _csv(tmp_path, "s,e,t\nu1,late,9999-12-31T23:59:59\nu1,early,2020-01-01T01:00:00\n")
    db = load_event_log(path, "s", "e", "t")
    assert [db.vocabulary[c] for c in db.sequences[0]] == ["early", "late"]


def test_times_with_different_utc_offsets_are_ordered_in_utc(tmp_path):
    # 01:00+02:00 is 23:00 UTC of the day before: before 00:30+00:00
    path = _csv(tmp_path, "s,e,t\nu1,a,2020-01-01T00:30:00+00:00\nu1,b,2020-01-01T01:00:00+02:00\n")
    db = load_event_log(path, "s", "e", "t")
    assert [db.vocabulary[c] for c in db.sequences[0]] == ["b", "a"]
    aware = pd.DataFrame(
        {
            "s": ["u1", "u1"],
            "e": ["a", "b"],
            "t": pd.to_datetime(["2020-01-02", "2020-01-01"]).tz_localize("UTC"),
        }
    )
    aware.to_parquet(tmp_path / "aware.parquet")
    db = load_event_log(tmp_path / "aware.parquet", "s", "e", "t")
    assert [db.vocabulary[c] for c in db.sequences[0]] == ["b", "a"]


def test_times_with_and_without_an_offset_are_one_line_naming_the_line(tmp_path):
    path = _csv(tmp_path, "s,e,t\nu1,a,2020-01-01T00:00:00Z\nu1,b,2020-01-01T00:30:00\n")
    with pytest.raises(
        DataFormatError, match=r"log.csv:3: time '2020-01-01T00:30:00' in column 't' has no UTC offset"
    ):
        load_event_log(path, "s", "e", "t")


@pytest.mark.parametrize(
    "frame, says",
    [
        (
            pd.DataFrame({"s": ["u1", "u1"], "e": [["x", "y"], ["z"]]}),
            r"event column 'e' holds nested values \(list",
        ),
        (
            pd.DataFrame({"s": ["u1", "u1"], "e": [{"a": 1}, {"a": 2}]}),
            r"event column 'e' holds nested values \(struct",
        ),
        (
            pd.DataFrame({"s": [["u1"], ["u2"]], "e": ["a", "b"]}),
            r"sequence column 's' holds nested values \(list",
        ),
    ],
    ids=["list-events", "struct-events", "list-ids"],
)
def test_nested_parquet_columns_are_refused_by_name(tmp_path, frame, says):
    frame.to_parquet(tmp_path / "nested.parquet")
    with pytest.raises(DataFormatError, match=says):
        load_event_log(tmp_path / "nested.parquet", "s", "e")


def test_control_characters_in_an_event_log_are_refused_on_every_loader(tmp_path):
    path = _csv(tmp_path, "s,e\nu1,a\x1b[31m\nu1,b\n")
    with pytest.raises(
        DataFormatError, match=r"log.csv:2: control character '\\x1b' in the event of column 'e'"
    ):
        load_event_log(path, "s", "e")
    path = _csv(tmp_path, "s\te\nu\x07\ta\n", name="log.tsv")
    with pytest.raises(DataFormatError, match=r"control character '\\x07' in the sequence of column 's'"):
        load_event_log(path, "s", "e")
    pd.DataFrame({"s": ["u1", "u1"], "e": ["a\x1b]0;x\x07", "b"]}).to_parquet(tmp_path / "c.parquet")
    with pytest.raises(DataFormatError, match=r"row 0: control character '\\x1b' in the event"):
        load_event_log(tmp_path / "c.parquet", "s", "e")


def test_a_real_event_named_unk_says_how_to_rename_it(tmp_path, capsys):
    path = _csv(tmp_path, "s,e\nu1,a\nu1,<unk>\n")
    for reserve in (False, True):
        with pytest.raises(
            DataFormatError, match=r"log.csv:3: event '<unk>' is the name ldhmm reserves .* rename it"
        ):
            load_event_log(path, "s", "e", reserve_unknown=reserve)
    text = _csv(tmp_path, "a b\nb <unk> a\n", name="log.txt")
    with pytest.raises(DataFormatError, match=r"log.txt:2: event '<unk>' is the name ldhmm reserves"):
        load_text(text)
    for extra in ([], ["--unknown", "reserve"]):
        assert (
            main(["fit", str(text), "--states", "2", "--quiet", "--out", str(tmp_path / "m.json"), *extra])
            == 1
        )
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "rename it in the file" in err, err


def test_error_lines_show_a_file_name_s_escapes_escaped(tmp_path, capsys):
    name = "\x1b]0;owned\x07\x1b[2Jlog.txt"
    assert main(["fit", str(tmp_path / name), "--states", "2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07\\x1b[2Jlog.txt" in err, err
    assert shown("é\ttab\x9b") == "é\\ttab\\x9b"
