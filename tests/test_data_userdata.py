"""Tests of a user's own data: vocabularies, plain token files and event logs."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldhmm.data import UNKNOWN, DataFormatError, SequenceDatabase, Vocabulary, load_event_log, load_text


def test_vocabulary_encode_decode():
    vocab = Vocabulary.build([["b", "a"], ["c", "a"]])
    assert vocab.symbols == ["a", "b", "c"] and len(vocab) == 3
    assert vocab.encode(["c", "a"]).tolist() == [2, 0]
    assert vocab.decode([1, 2]) == ["b", "c"]
    with pytest.raises(ValueError, match="'zzz' is not in the vocabulary"):
        vocab.encode(["a", "zzz"])
    with pytest.raises(ValueError, match="reserve_unknown=True"):
        vocab.encode(["zzz"], unknown="map")
    with_unk = Vocabulary.build([["b", "a"]], reserve_unknown=True)
    assert with_unk.symbols == ["a", "b", UNKNOWN] and with_unk.unknown_index == 2
    assert with_unk.encode(["a", "zzz"], unknown="map").tolist() == [0, 2]
    with pytest.raises(ValueError, match="unknown must be"):
        with_unk.encode(["a"], unknown="skip")
    with pytest.raises(ValueError, match="duplicate"):
        Vocabulary(["a", "a"])


def test_load_text_train_and_score(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("# my clicks\nhome, search,cart\n\nhome search   home\n  cart\n")
    db = load_text(train)
    assert db.vocabulary == ["cart", "home", "search"]
    assert [s.tolist() for s in db.sequences] == [[1, 2, 0], [1, 2, 1], [0]]
    assert db.ids == ["train.txt:2", "train.txt:4", "train.txt:5"]

    test = tmp_path / "test.txt"
    test.write_text("home cart\nhome checkout\n")
    with pytest.raises(DataFormatError, match=r"test\.txt:2: token 'checkout' is not in the vocabulary"):
        load_text(test, vocabulary=db)
    vocab = Vocabulary.build([["cart", "home", "search"]], reserve_unknown=True)
    scored = load_text(test, vocabulary=vocab, unknown="map")
    assert scored.vocabulary == vocab.symbols
    assert [s.tolist() for s in scored.sequences] == [[1, 0], [1, 3]]


def test_load_text_bad_input(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"")
    with pytest.raises(DataFormatError, match="no sequences"):
        load_text(path)
    path.write_bytes(b"a b\n , ,\n")
    with pytest.raises(DataFormatError, match=r"bad\.txt:2: the line holds separators"):
        load_text(path)
    path.write_bytes(b"a b\n\xff\xfe c\n")
    with pytest.raises(DataFormatError, match=r"bad\.txt:2: not UTF-8"):
        load_text(path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.lists(st.text(alphabet="abcXYZ_-.01", min_size=1, max_size=4), min_size=1, max_size=6),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([" ", ",", ", ", "\t"]),
)
def test_load_text_property(tmp_path, sequences, sep):
    path = tmp_path / "seqs.txt"
    path.write_text("\n".join(sep.join(s) for s in sequences) + "\n")
    db = load_text(path)
    assert len(db) == len(sequences)
    assert [[db.vocabulary[c] for c in s] for s in db.sequences] == sequences


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_load_text_garbage(tmp_path, body):
    path = tmp_path / "garbage.txt"
    path.write_bytes(body)
    try:
        db = load_text(path)
    except DataFormatError:
        return
    assert isinstance(db, SequenceDatabase) and len(db) >= 1


def _events():
    return pd.DataFrame(
        {
            "user": ["u2", "u1", "u2", "u1", "u3", "u2"],
            "t": [5, 2, 1, 1, 7, 3],
            "page": ["news", "home", "home", "home", "sport", "news"],
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_load_event_log(tmp_path, suffix):
    path = tmp_path / f"log{suffix}"
    frame = _events()
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    db = load_event_log(path, "user", "page", time_col="t")
    assert db.vocabulary == ["home", "news", "sport"]
    assert db.ids == ["u2", "u1", "u3"]  # order of first appearance
    # u2 by time: home(1) news(3) news(5); u1: home(1) home(2); u3: sport
    assert [s.tolist() for s in db.sequences] == [[0, 1, 1], [0, 0], [2]]
    by_file_order = load_event_log(path, "user", "page")
    assert [s.tolist() for s in by_file_order.sequences] == [[1, 0, 1], [0, 0], [2]]


def test_load_event_log_datetimes_and_unknown(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("sid,when,ev\na,2024-01-02 10:00,y\na,2024-01-01 09:00,x\nb,2024-01-01,x\n")
    db = load_event_log(path, "sid", "ev", time_col="when", vocabulary=["x", "y", UNKNOWN])
    assert [s.tolist() for s in db.sequences] == [[0, 1], [0]]
    path.write_text("sid,ev\na,x\na,new\n")
    with pytest.raises(DataFormatError, match=r"log\.csv:3: event 'new' is not in the vocabulary"):
        load_event_log(path, "sid", "ev", vocabulary=["x", "y"])
    db = load_event_log(path, "sid", "ev", vocabulary=["x", "y", UNKNOWN], unknown="map")
    assert db[0].tolist() == [0, 2]


def test_load_event_log_bad_input(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("user,page\nu1,home\n")
    with pytest.raises(DataFormatError, match=r"missing event column 'event'.*columns: user, page"):
        load_event_log(path, "user", "event")
    with pytest.raises(DataFormatError, match=r"missing sequence column 'session', time column 'ts'"):
        load_event_log(path, "session", "page", time_col="ts")
    path.write_text("")
    with pytest.raises(DataFormatError, match="empty file"):
        load_event_log(path, "user", "page")
    path.write_text("user,page\n")
    with pytest.raises(DataFormatError, match="no events"):
        load_event_log(path, "user", "page")
    path.write_text("user,page\nu1,home\nu1,\n")
    with pytest.raises(DataFormatError, match=r"log\.csv:3: empty event value"):
        load_event_log(path, "user", "page")
    path.write_text("user,page,t\nu1,home,1\nu1,home,soon\n")
    with pytest.raises(DataFormatError, match=r"log\.csv:3: time 'soon'"):
        load_event_log(path, "user", "page", time_col="t")
    path.write_text("user,page\nu1,home\nu1,home,extra,fields\n")
    with pytest.raises(DataFormatError, match=r"log\.csv:3: malformed CSV"):
        load_event_log(path, "user", "page")
    parquet = tmp_path / "log.parquet"
    parquet.write_bytes(b"not parquet at all")
    with pytest.raises(DataFormatError, match="Parquet"):
        load_event_log(parquet, "user", "page")
