"""Partitioned data sets: write, plan, read per partition, validation, and ``ldhmm data export``."""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldhmm.cli import data as data_command
from ldhmm.cli.main import add_command
from ldhmm.data import (
    DataFormatError,
    PartitionSpec,
    SequenceDatabase,
    balanced_partitions,
    load_partitioned,
    load_path,
    load_text,
    plan_partitions,
    read_manifest,
    read_partition,
    write_partitioned,
)
from ldhmm.data import partitions as partitions_module

LAYOUTS = ("sequences", "events")


def make_db(seed=0, m=60, n_symbols=5, max_length=25, labels=True, ids=True, name="toy") -> SequenceDatabase:
    rng = np.random.default_rng(seed)
    sequences = [rng.integers(0, n_symbols, rng.integers(1, max_length + 1)) for _ in range(m)]
    return SequenceDatabase.from_sequences(
        sequences,
        [f"sym{k}" for k in range(n_symbols)],
        labels=rng.integers(0, 3, m) if labels else None,
        label_names=["A", "B", "C"] if labels else None,
        ids=[f"user-{rng.integers(1 << 30)}-{i}" for i in range(m)] if ids else None,
        name=name,
    )


def original_indices(db: SequenceDatabase, part: SequenceDatabase) -> np.ndarray:
    """Where each sequence of a partition sits in ``db`` (by id, or by position without ids)."""
    if db.ids is None:
        return np.array([int(i) for i in part.ids], dtype=np.int64)
    where = {i: k for k, i in enumerate(db.ids)}
    return np.array([where[i] for i in part.ids], dtype=np.int64)


def check_partitions(db: SequenceDatabase, directory: Path, n_partitions: int) -> list[PartitionSpec]:
    """Every sequence read exactly once, unchanged, with balanced token counts."""
    specs = plan_partitions(directory, n_partitions)
    assert 1 <= len(specs) <= n_partitions
    seen = []
    for spec in specs:
        part = read_partition(pickle.loads(pickle.dumps(spec)))
        assert (len(part), part.n_tokens) == (spec.n_sequences, spec.n_tokens)
        assert part.vocabulary == db.vocabulary and part.label_names == db.label_names
        idx = original_indices(db, part)
        for k, i in enumerate(idx):
            np.testing.assert_array_equal(part[k], db[int(i)])
        if db.labels is not None:
            np.testing.assert_array_equal(part.labels, db.labels[idx])
        seen.append(idx)
    # concatenated in plan order and mapped back: the database
    order = np.concatenate(seen)
    np.testing.assert_array_equal(np.sort(order), np.arange(len(db)))
    manifest = read_manifest(directory)
    pieces = [g["n_tokens"] for f in manifest["files"] for g in f.get("row_groups") or [f]]
    assert max(s.n_tokens for s in specs) <= db.n_tokens / n_partitions + max(pieces)
    return specs


def test_event_log_columns_are_refused_where_nothing_reads_them(tmp_path):
    """A partitioned data set's sequences are coded already and a plain token file has no
    columns: an event log's column options there are one line naming them, not dropped."""
    out = write_partitioned(make_db(), tmp_path / "data", n_files=2)
    with pytest.raises(ValueError, match="holds coded sequences; --sequence-col, --event-col, --time-col"):
        load_path(out, sequence_col="user", event_col="event", time_col="t")
    with pytest.raises(ValueError, match="holds coded sequences; --sep"):
        load_path(out, sep=",")
    (tmp_path / "log.txt").write_text("a b c\nb c\n")
    with pytest.raises(ValueError, match="an event log needs --sequence-col and --event-col"):
        load_path(tmp_path / "log.txt", time_col="t")


# ============================================================================ round trips
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("labels,ids", [(True, True), (False, False), (True, False), (False, True)])
def test_round_trip(tmp_path, layout, labels, ids):
    db = make_db(labels=labels, ids=ids)
    out = write_partitioned(db, tmp_path / "data", layout=layout, n_files=4, row_group_tokens=60)
    assert load_partitioned(out) == db
    assert load_path(out) == db
    manifest = read_manifest(out)
    assert manifest["layout"] == layout and manifest["ids"] is ids and manifest["labels"] is labels
    assert len(manifest["files"]) == 4
    assert sum(f["n_tokens"] for f in manifest["files"]) == db.n_tokens
    for n in (1, 3, 7, 1000):
        check_partitions(db, out, n)


def test_plan_pieces_and_determinism(tmp_path):
    db = make_db(m=200)
    out = write_partitioned(db, tmp_path / "a", n_files=3, row_group_tokens=100)
    specs = plan_partitions(out, 4)
    assert specs == plan_partitions(out, 4)
    copy = tmp_path / "b"
    shutil.copytree(out, copy)
    assert [s.pieces for s in plan_partitions(copy, 4)] == [s.pieces for s in specs]
    manifest = read_manifest(out)
    n_groups = sum(len(f["row_groups"]) for f in manifest["files"])
    assert n_groups > 4  # row groups, not files, are the pieces of the sequences layout
    assert sum(len(g) for s in specs for _, g in s.pieces) == n_groups
    for spec in specs:
        names = [name for name, _ in spec.pieces]
        assert names == sorted(names) and len(set(names)) == len(names)
        assert all(list(g) == sorted(g) for _, g in spec.pieces)
    events = write_partitioned(db, tmp_path / "e", layout="events", n_files=5)
    assert all(g is None for s in plan_partitions(events, 2) for _, g in s.pieces)


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    n_symbols=st.integers(1, 6),
    layout=st.sampled_from(LAYOUTS),
    n_files=st.integers(1, 6),
    n_partitions=st.integers(1, 9),
    row_group_tokens=st.integers(1, 80),
    labels=st.booleans(),
    ids=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_round_trip_property(
    lengths, n_symbols, layout, n_files, n_partitions, row_group_tokens, labels, ids, seed
):
    rng = np.random.default_rng(seed)
    m = len(lengths)
    db = SequenceDatabase.from_sequences(
        [rng.integers(0, n_symbols, n) for n in lengths],
        [f"s{k}" for k in range(n_symbols)],
        labels=rng.integers(0, 2, m) if labels else None,
        label_names=["x", "y"] if labels else None,
        ids=[f"id{k}" for k in rng.permutation(m)] if ids else None,
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = write_partitioned(
            db, Path(tmp) / "d", layout=layout, n_files=n_files, row_group_tokens=row_group_tokens
        )
        assert len(read_manifest(out)["files"]) == min(n_files, m)
        assert load_partitioned(out) == db
        check_partitions(db, out, n_partitions)


def test_shuffled_events_files_read_right(tmp_path):
    rng = np.random.default_rng(1)
    for ids in (True, False):
        db = make_db(seed=2, ids=ids)
        out = write_partitioned(db, tmp_path / f"ids{ids}", layout="events", n_files=3)
        for f in sorted(out.glob("*.parquet")):
            table = pq.read_table(f)
            pq.write_table(table.take(pa.array(rng.permutation(table.num_rows))), f)
        back = load_partitioned(out)
        if not ids:
            assert back == db  # positions restore the database order
        else:
            got = {i: back[k].tolist() for k, i in enumerate(back.ids)}
            assert got == {i: db[k].tolist() for k, i in enumerate(db.ids)}
            lab = dict(zip(back.ids, back.labels.tolist()))
            assert lab == dict(zip(db.ids, db.labels.tolist()))
        check_partitions(db, out, 2)


# ============================================================================ in-memory partitions
def partition_database(db: SequenceDatabase, n_partitions: int):
    """``db`` cut into partitions balanced by token count (:func:`balanced_partitions` of its
    lengths): ``(parts, indices)`` with ``parts[p] == db.subset(indices[p])``; none of an empty
    database."""
    indices = balanced_partitions(db.lengths, n_partitions)
    if len(db) == 0:
        return [], []
    return [db.subset(idx) for idx in indices], indices


@pytest.mark.parametrize("n", [1, 2, 5, 59, 60, 500])
def test_partition_database(n):
    db = make_db(seed=3, m=60)
    parts, indices = partition_database(db, n)
    assert len(parts) == len(indices) == min(n, len(db))
    np.testing.assert_array_equal(np.sort(np.concatenate(indices)), np.arange(len(db)))
    for part, idx in zip(parts, indices):
        assert len(idx) > 0 and np.all(np.diff(idx) > 0)
        assert part == db.subset(idx)
    tokens = [p.n_tokens for p in parts]
    assert max(tokens) <= db.n_tokens / n + db.lengths.max()
    again, again_idx = partition_database(db, n)
    assert all(np.array_equal(a, b) for a, b in zip(indices, again_idx))
    assert partition_database(db.subset([]), 3) == ([], [])
    with pytest.raises(ValueError, match="n_partitions"):
        partition_database(db, 0)


def _argmin_partitions(lengths, n_partitions):
    """The in-process partitioner the distributed fit used before it shared
    ``balanced_partitions`` (kept here as the reference its partitions must equal)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = max(1, min(int(n_partitions), lengths.size))
    load = np.zeros(n, dtype=np.int64)
    assign = np.empty(lengths.size, dtype=np.int64)
    for i in np.argsort(-lengths, kind="stable"):
        p = int(np.argmin(load))
        assign[i] = p
        load[p] += lengths[i]
    return [np.flatnonzero(assign == p) for p in range(n)]


def _plan_pieces(lengths, n_partitions):
    """What ``plan_partitions`` assigns, as piece indices, for pieces of these token counts."""
    assign = partitions_module._greedy_assign(
        np.asarray(lengths, dtype=np.int64), min(n_partitions, len(lengths))
    )
    return [np.flatnonzero(assign == p) for p in range(int(assign.max()) + 1)]


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=80),
    n=st.integers(1, 12),
)
def test_balanced_partitions_equal_both_earlier_partitioners(lengths, n):
    # small lengths: many ties, where the two tie rules (argmin's first, the heap's lowest
    # (load, partition)) would part if they differed
    got = balanced_partitions(lengths, n)
    for reference in (_argmin_partitions(lengths, n), _plan_pieces(lengths, n)):
        assert len(got) == len(reference)
        assert all(a.dtype == np.int64 and np.array_equal(a, b) for a, b in zip(got, reference))


def test_balanced_partitions_known_cut_and_edges():
    # longest first onto the lightest partition; ties: the earlier sequence, the lower partition
    got = balanced_partitions([5, 3, 3, 2, 2, 1], 2)
    assert [g.tolist() for g in got] == [[0, 3, 5], [1, 2, 4]]
    assert [g.tolist() for g in balanced_partitions([4, 4, 4], 5)] == [[0], [1], [2]]
    assert [g.tolist() for g in balanced_partitions([], 3)] == [[]]
    assert [g.tolist() for g in balanced_partitions([3, 0, 0], 3)] == [[0], [1, 2]]  # none empty
    db = make_db(seed=5, m=40)
    assert all(
        np.array_equal(a, b) for a, b in zip(partition_database(db, 3)[1], balanced_partitions(db.lengths, 3))
    )
    with pytest.raises(ValueError, match="n_partitions"):
        balanced_partitions([1, 2], 0)


# ============================================================================ writing rules
def test_write_refuses_and_replaces(tmp_path):
    db = make_db()
    out = write_partitioned(db, tmp_path / "d")
    with pytest.raises(FileExistsError, match="not empty"):
        write_partitioned(db, out)
    smaller = db.subset(np.arange(10))
    write_partitioned(smaller, out, layout="events", n_files=2, overwrite=True)
    assert load_partitioned(out) == smaller
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a partitioned data set"):
        write_partitioned(db, other, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert load_partitioned(write_partitioned(db, empty)) == db
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "empty", "mine"]  # no temporaries


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_overwrite_deletes_nothing_the_data_set_did_not_list(tmp_path, monkeypatch, capsys, as_url):
    """The four deletions of a hostile round: a foreign dataset.json beside a user's file, the
    working directory holding the input, and a real export with a user's file and folder added."""
    text = tmp_path / "seqs.txt"
    text.write_text("a b c\nb b\nc a a a\n")
    target = lambda path: path.as_uri() if as_url else str(path)  # noqa: E731
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "dataset.json").write_text("{}")
    (fake / "thesis.tex").write_text("keep me")
    real = tmp_path / "ds"
    assert run_cli(["data", "export", str(text), target(real), "--quiet"]) == 0
    (real / "my-notes.txt").write_text("keep me")
    (real / "sub").mkdir()
    (real / "sub" / "my-work.txt").write_text("keep me")
    cases = [
        (fake, "is not an ldhmm data set's manifest"),
        (real, "holds 'my-notes.txt' and 1 more, which its data set's manifest does not list"),
    ]
    for path, needle in cases:
        before = sorted(str(p.relative_to(tmp_path)) for p in path.rglob("*"))
        rc = run_cli(["data", "export", str(text), target(path), "--quiet", "--overwrite"])
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and needle in err and "refusing to replace it" in err, err
        assert sorted(str(p.relative_to(tmp_path)) for p in path.rglob("*")) == before
    assert (fake / "thesis.tex").read_text() == "keep me"
    assert (real / "sub" / "my-work.txt").read_text() == "keep me"
    (real / "my-notes.txt").unlink()
    shutil.rmtree(real / "sub")
    assert run_cli(["data", "export", str(text), target(real), "--quiet", "--overwrite", "--files", "1"]) == 0
    assert sorted(p.name for p in real.iterdir()) == ["dataset.json", "part-00000.parquet"]
    if not as_url:  # `cd work && ldhmm data export seqs.txt . --overwrite`
        work = tmp_path / "work"
        work.mkdir()
        assert run_cli(["data", "export", str(text), str(work / "ds"), "--quiet"]) == 0
        for name in (work / "ds").iterdir():
            shutil.move(str(name), work)
        (work / "ds").rmdir()
        (work / "analysis.py").write_text("keep me")
        monkeypatch.chdir(work)
        before = sorted(p.name for p in work.iterdir())
        assert run_cli(["data", "export", "../seqs.txt", ".", "--quiet", "--overwrite"]) == 1
        assert "the working, home or root directory" in capsys.readouterr().err
        assert sorted(p.name for p in work.iterdir()) == before


def test_write_is_atomic(tmp_path, monkeypatch):
    db = make_db()
    real = partitions_module._write_sequences_file
    calls = []

    def failing(*args):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args)

    monkeypatch.setattr(partitions_module, "_write_sequences_file", failing)
    with pytest.raises(OSError, match="disk full"):
        write_partitioned(db, tmp_path / "d", n_files=3)
    assert list(tmp_path.iterdir()) == []


def test_write_checks_ids(tmp_path):
    db = make_db()
    twice = SequenceDatabase(db.tokens, db.offsets, db.vocabulary, ids=["a"] * len(db))
    with pytest.raises(ValueError, match="'a' names two sequences"):
        write_partitioned(twice, tmp_path / "d", layout="events")
    assert load_partitioned(write_partitioned(twice, tmp_path / "s")) == twice  # fine one row each
    blank = SequenceDatabase(db.tokens, db.offsets, db.vocabulary, ids=[""] + ["b"] * (len(db) - 1))
    with pytest.raises(ValueError, match="empty id"):
        write_partitioned(blank, tmp_path / "d2")
    with pytest.raises(ValueError, match="layout"):
        write_partitioned(db, tmp_path / "d3", layout="rows")
    with pytest.raises(ValueError, match="no sequences"):
        write_partitioned(db.subset([]), tmp_path / "d4")


# ============================================================================ hostile inputs
def write_raw(directory: Path, layout: str, tables: list[dict], n_symbols=3, labels=False) -> Path:
    """A data set as another producer would write it: files plus a consistent dataset.json."""
    directory.mkdir()
    files = []
    for k, columns in enumerate(tables):
        name = f"f{k}.parquet"
        pq.write_table(pa.table(columns), directory / name)
        if layout == "events":
            n_seq, n_tok = len(set(columns["sequence_id"])), len(columns["sequence_id"])
        else:
            n_seq, n_tok = len(columns["sequence_id"]), sum(len(s) for s in columns["symbols"])
        files.append({"path": name, "n_sequences": n_seq, "n_tokens": n_tok})
    manifest = {
        "format": "ldhmm-partitioned",
        "format_version": 1,
        "layout": layout,
        "name": "raw",
        "vocabulary": None,
        "n_symbols": n_symbols,
        "label_names": ["A", "B"] if labels else None,
        "labels": labels,
        "ids": True,
        "n_sequences": sum(f["n_sequences"] for f in files),
        "n_tokens": sum(f["n_tokens"] for f in files),
        "files": files,
    }
    (directory / "dataset.json").write_text(json.dumps(manifest))
    return directory


def events(ids, positions, symbols, **extra):
    return {"sequence_id": ids, "position": positions, "symbol": symbols, **extra}


def read_everything(directory: Path):
    """Read a data set through both routes and return the error message of the first failure."""
    with pytest.raises(DataFormatError) as whole:
        load_partitioned(directory)
    with pytest.raises(DataFormatError) as parts:
        for spec in plan_partitions(directory, 1):
            read_partition(spec)
    assert str(whole.value) == str(parts.value)
    assert "\n" not in str(whole.value)
    return str(whole.value)


def test_raw_producer_reads(tmp_path):
    d = write_raw(
        tmp_path / "ok",
        "events",
        [events(["u", "v", "u"], [5, 0, 2], [1, 2, 0]), events(["w"], [0], [2])],
    )
    db = load_partitioned(d)
    assert db.vocabulary == ["0", "1", "2"] and db.ids == ["u", "v", "w"]
    assert [s.tolist() for s in db] == [[0, 1], [2], [2]]


def test_missing_dataset_json(tmp_path):
    (tmp_path / "d").mkdir()
    for call in (load_partitioned, lambda d: plan_partitions(d, 2), read_manifest, load_path):
        with pytest.raises(DataFormatError, match=r"d/dataset\.json: missing; not a partitioned data set"):
            call(tmp_path / "d")


def test_bad_dataset_json(tmp_path):
    d = write_raw(tmp_path / "d", "events", [events(["u"], [0], [1])])
    good = json.loads((d / "dataset.json").read_text())
    cases = [
        ({"format": "other"}, "format is 'other'"),
        ({"format_version": 2}, "newer ldhmm"),
        ({"layout": "rows"}, "layout is 'rows'"),
        ({"vocabulary": ["a", "b"]}, "2 names, but n_symbols is 3"),
        ({"n_tokens": 7}, "add up to 1, not 7"),
        ({"files": [{**good["files"][0], "path": "../f0.parquet"}]}, "must name a file inside"),
        ({"labels": True}, "'labels' is true but 'label_names' is null"),
    ]
    for change, message in cases:
        (d / "dataset.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(DataFormatError, match="dataset.json: .*" + message.replace("(", r"\(")):
            plan_partitions(d, 1)
    (d / "dataset.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="not valid JSON"):
        read_manifest(d)


def test_listed_file_missing(tmp_path):
    out = write_partitioned(make_db(), tmp_path / "d", n_files=3)
    (out / "part-00001.parquet").unlink()
    with pytest.raises(DataFormatError, match=r"part-00001\.parquet: listed in dataset\.json but missing"):
        plan_partitions(out, 2)
    with pytest.raises(DataFormatError, match=r"part-00001\.parquet: listed in dataset\.json but missing"):
        load_partitioned(out)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_missing_column(tmp_path, layout):
    if layout == "events":
        columns, missing = events(["u"], [0], [1]), "position"
    else:
        columns, missing = {"sequence_id": ["u"], "symbols": [[1]]}, "symbols"
    d = write_raw(tmp_path / "d", layout, [columns])
    pq.write_table(pa.table(columns).drop_columns([missing]), d / "f0.parquet")
    message = read_everything(d)
    assert message.startswith(f"{d / 'f0.parquet'}: missing column '{missing}'; the file has columns: ")


def test_symbol_out_of_range(tmp_path):
    d = write_raw(
        tmp_path / "s", "sequences", [{"sequence_id": ["a", "b", "c"], "symbols": [[0], [1, 2], [0, 3]]}]
    )
    message = read_everything(d)
    assert message == f"{d / 'f0.parquet'}: row 2: symbol 3 is outside 0..2 (n_symbols 3)"
    d = write_raw(tmp_path / "e", "events", [events(["a"], [0], [0]), events(["b", "b"], [0, 1], [1, -1])])
    assert read_everything(d) == f"{d / 'f1.parquet'}: row 1: symbol -1 is outside 0..2 (n_symbols 3)"


def test_symbol_out_of_range_names_file_row_in_later_row_group(tmp_path):
    db = make_db(m=40, labels=False)
    out = write_partitioned(db, tmp_path / "d", n_files=1, row_group_tokens=40)
    path = out / "part-00000.parquet"
    pf = pq.ParquetFile(path)
    assert pf.num_row_groups > 2
    tables = [pf.read_row_group(g) for g in range(pf.num_row_groups)]
    last = tables[-1].to_pydict()
    last["symbols"][-1][-1] = 99
    tables[-1] = pa.table(last, schema=tables[-1].schema)
    with pq.ParquetWriter(path, tables[0].schema) as writer:
        for t in tables:
            writer.write_table(t)
    spec = next(s for s in plan_partitions(out, 50) if s.pieces[0][1] == (pf.num_row_groups - 1,))
    with pytest.raises(
        DataFormatError, match=rf"part-00000\.parquet: row {len(db) - 1}: symbol 99 is outside"
    ):
        read_partition(spec)


def test_empty_sequence(tmp_path):
    d = write_raw(tmp_path / "d", "sequences", [{"sequence_id": ["a", "b"], "symbols": [[0, 1, 2], []]}])
    assert read_everything(d) == f"{d / 'f0.parquet'}: row 1: sequence 'b' is empty"


def test_sequence_in_two_event_files(tmp_path):
    d = write_raw(
        tmp_path / "d",
        "events",
        [events(["a", "b"], [0, 0], [0, 1]), events(["c"], [0], [1]), events(["b", "c"], [1, 1], [2, 2])],
    )
    message = read_everything(d)
    assert message == (
        f"{d / 'f2.parquet'}: sequence id 'b' also appears in {d / 'f0.parquet'}; "
        "the events layout keeps each sequence in one file"
    )
    # a worker whose partition holds one of the two files cannot see the other: the counts in
    # dataset.json are the producer's, so the whole-set check is load_partitioned's
    assert len(plan_partitions(d, 3)) == 3


def test_duplicate_positions(tmp_path):
    d = write_raw(tmp_path / "d", "events", [events(["a", "b", "a", "b"], [0, 4, 1, 4], [0, 1, 2, 0])])
    assert read_everything(d) == f"{d / 'f0.parquet'}: rows 1 and 3: sequence 'b' has position 4 twice"


def test_other_bad_files(tmp_path):
    d = write_raw(
        tmp_path / "lab",
        "events",
        [events(["a", "a"], [0, 1], [0, 1], label=["A", "B"])],
        labels=True,
    )
    assert read_everything(d) == f"{d / 'f0.parquet'}: row 1: sequence 'a' has two different labels"
    d = write_raw(
        tmp_path / "unk", "sequences", [{"sequence_id": ["a"], "symbols": [[0]], "label": ["Z"]}], labels=True
    )
    assert "row 0: label 'Z' is not one of the label names ['A', 'B']" in read_everything(d)
    d = write_raw(tmp_path / "null", "events", [events(["a", None], [0, 1], [0, 1])])
    assert read_everything(d) == f"{d / 'f0.parquet'}: row 1: null in column 'sequence_id'"
    d = write_raw(tmp_path / "type", "events", [events(["a"], [0], [1.5])])
    assert "column 'symbol' has type double, expected an integer" in read_everything(d)
    d = write_raw(tmp_path / "garbage", "events", [events(["a"], [0], [1])])
    (d / "f0.parquet").write_bytes(b"not parquet at all")
    assert "f0.parquet: not a readable Parquet file" in read_everything(d)


def test_counts_and_plan_changes_are_caught(tmp_path):
    db = make_db()
    out = write_partitioned(db, tmp_path / "d", layout="events", n_files=2)
    specs = plan_partitions(out, 2)
    table = pq.read_table(out / "part-00000.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), out / "part-00000.parquet")
    with pytest.raises(DataFormatError, match=r"part-00000\.parquet: the file holds .* dataset\.json says"):
        load_partitioned(out)
    write_partitioned(db.subset(np.arange(5)), out, layout="events", n_files=2, overwrite=True)
    with pytest.raises(DataFormatError, match="changed since the partitions were planned"):
        read_partition(specs[0])


# ============================================================================ the command
def run_cli(argv) -> int:
    parser = argparse.ArgumentParser(prog="ldhmm")
    add_command(parser.add_subparsers(dest="command"), "data", data_command)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_export_and_info(tmp_path, capsys):
    text = tmp_path / "log.txt"
    text.write_text("a b c\nb b\n# comment\nc a a a\nb\n")
    expected = load_text(text)
    for layout in LAYOUTS:
        out = tmp_path / f"out-{layout}"
        rc = run_cli(["data", "export", str(text), str(out), "--layout", layout, "--files", "2"])
        captured = capsys.readouterr()
        assert rc == 0, captured.err
        assert f"{layout} layout, 2 files, 4 sequences, 10 tokens" in captured.out
        assert load_partitioned(out) == expected
        assert run_cli(["data", "info", str(out)]) == 0
        assert "log: 4 sequences, 10 tokens" in capsys.readouterr().out
        rc = run_cli(["data", "export", str(text), str(out), "--quiet"])
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and "--overwrite" in err
        rc = run_cli(["data", "export", str(text), str(out), "--quiet", "--overwrite", "--files", "1"])
        assert rc == 0 and capsys.readouterr().out == ""
        assert len(read_manifest(out)["files"]) == 1
