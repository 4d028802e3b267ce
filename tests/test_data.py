"""Tests of the data layer: the real UCI files, the text format, bad input, splits, fetch, CLI."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldhmm import LDHMM
from ldhmm.cli import data as data_command
from ldhmm.cli.main import add_command
from ldhmm.data import (
    DataFormatError,
    SequenceDatabase,
    fetch,
    kfold_indices,
    load_dataset,
    load_entree,
    load_msnbc,
    load_paper_subset,
    load_splice,
    read_msnbc,
    read_splice,
    resolve_data_dir,
)
from ldhmm.data.fetch import ChecksumError
from ldhmm.data.seeds import derived_seeds

REPO = Path(__file__).resolve().parents[1]


def _data_dir() -> Path | None:
    env = os.environ.get("LDHMM_DATA")
    candidate = Path(env) if env else REPO.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


DATA = _data_dir()
needs_data = pytest.mark.skipif(DATA is None, reason="UCI data not found (set LDHMM_DATA)")

MSNBC_HEADER = (
    "% Different categories found in input file:\r\n\r\nfrontpage news tech\r\n\r\n\r\n% Sequences:\r\n\r\n"
)


def write_msnbc(path: Path, body_lines, compress=False, header=MSNBC_HEADER) -> Path:
    text = header + "".join(line + " \r\n" for line in body_lines)
    data = text.encode("ascii")
    if compress:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


# ============================================================================ real UCI files
@pytest.fixture(scope="module")
def msnbc():
    if DATA is None:
        pytest.skip("UCI data not found")
    return load_msnbc(DATA)


@needs_data
def test_msnbc_full_counts(msnbc):
    assert len(msnbc) == 989_818
    assert msnbc.n_tokens == 4_698_794
    assert msnbc.n_symbols == 17
    assert msnbc.vocabulary[:3] == ["frontpage", "news", "tech"]
    assert msnbc.vocabulary[8] == "msn-news" and msnbc.vocabulary[16] == "travel"
    assert msnbc.tokens.dtype == np.int8
    stats = msnbc.length_stats()
    assert (stats["min"], stats["max"]) == (1, 14_795)
    assert int((msnbc.lengths == 1).sum()) == 365_435
    expected_counts = [
        940469,
        452387,
        207479,
        386217,
        151409,
        414928,
        305615,
        439398,
        196614,
        131760,
        96817,
        264899,
        216125,
        395880,
        56576,
        25249,
        16972,
    ]
    assert msnbc.symbol_counts().tolist() == expected_counts
    # the paper's subset, by filter on the loaded database
    assert len(msnbc.filter_length(20, 100)) == 31_071


@needs_data
def test_msnbc_paper_subset_and_sample():
    subset = load_paper_subset("msnbc", DATA)
    assert len(subset) == 31_071
    assert subset.lengths.min() >= 20 and subset.lengths.max() <= 100
    sample_a = load_paper_subset("msnbc", DATA, n=500, seed=3)
    sample_b = load_paper_subset("msnbc", DATA, n=500, seed=3)
    assert len(sample_a) == 500 and sample_a == sample_b


@needs_data
def test_entree_counts_directory_and_archive(tmp_path):
    db = load_entree(DATA)
    assert len(db) == 50_672
    assert db.n_symbols == 7
    assert db.vocabulary == [
        "browse",
        "cheaper",
        "nicer",
        "more-traditional",
        "more-creative",
        "more-lively",
        "quieter",
    ]
    assert db.symbol_counts().tolist() == [136646, 7841, 26525, 3155, 5689, 6336, 3099]
    assert db.lengths.max() == 59 and db.lengths.min() == 1
    assert db.ids[0] == "session.1996-Q3:1"
    per_file = {}
    for i in db.ids:
        f = i.split(":")[0]
        per_file[f] = per_file.get(f, 0) + 1
    assert list(per_file.values()) == [755, 1786, 5005, 4002, 3851, 3534, 5296, 5502, 4848, 7956, 6838, 1299]
    assert len(db.filter_length(20, 59)) == 422
    assert len(load_paper_subset("entree", DATA)) == 422
    # the first session: 0, 560L, 110L, end 110 -> two browse steps
    assert db[0].tolist() == [0, 0]
    # the archive gives the same database
    shutil.copy(DATA / "entree_data.tar.gz", tmp_path)
    assert load_entree(tmp_path) == db
    # the full codebook keeps all 9 letters with stable codes
    full = load_entree(DATA, alphabet="codebook", min_length=20, max_length=59)
    assert full.n_symbols == 9 and len(full) == 422
    assert full.symbol_counts()[[3, 8]].tolist() == [0, 0]  # O and T never occur


@needs_data
def test_splice_counts_and_ambiguity_policies():
    db = load_splice(DATA)
    assert len(db) == 3190 and db.n_symbols == 4
    assert db.class_counts() == {"EI": 767, "IE": 768, "N": 1655}
    assert set(db.lengths.tolist()) == {60}
    assert db.ids[0] == "ATRINS-DONOR-521"
    assert db.meta["rows_with_ambiguity_codes"] == 15 and db.meta["ambiguity_codes"] == 60
    counts = db.symbol_counts()
    unambiguous = np.array([44487, 50300, 50245, 46308])
    assert np.all(counts >= unambiguous) and counts.sum() == 191_400
    assert load_splice(DATA, seed=0) == db  # seeded
    dropped = load_splice(DATA, ambiguous="drop")
    assert len(dropped) == 3175
    assert dropped.class_counts() == {"EI": 762, "IE": 765, "N": 1648}
    symbol = load_splice(DATA, ambiguous="symbol")
    assert symbol.vocabulary == ["A", "C", "G", "T", "N"]
    assert symbol.symbol_counts().tolist() == [44487, 50300, 50245, 46308, 60]
    with pytest.raises(ValueError, match="ambiguous"):
        load_splice(DATA, ambiguous="guess")


@needs_data
def test_load_dataset_and_env(monkeypatch):
    monkeypatch.setenv("LDHMM_DATA", str(DATA))
    assert resolve_data_dir() == DATA
    assert len(load_dataset("splice", min_length=61)) == 0
    with pytest.raises(ValueError, match="unknown data set"):
        load_dataset("iris")
    with pytest.raises(ValueError, match="subsets"):
        load_paper_subset("splice")


def test_resolve_data_dir_errors(monkeypatch, tmp_path):
    monkeypatch.delenv("LDHMM_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="LDHMM_DATA"):
        resolve_data_dir()
    with pytest.raises(FileNotFoundError, match="ldhmm data fetch"):
        resolve_data_dir(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="ldhmm data fetch msnbc"):
        load_msnbc(tmp_path)


def test_resolve_data_dir_order(monkeypatch, tmp_path):
    arg, env, default = (tmp_path / n for n in ("arg", "env", "default"))
    for d in (arg, env, default):
        d.mkdir()
    monkeypatch.setenv("LDHMM_DATA", str(env))
    assert resolve_data_dir(arg, default=default) == arg  # the argument first
    assert resolve_data_dir(None, default=default) == env  # then the environment
    assert resolve_data_dir("", default=default) == env  # an empty argument is no argument
    monkeypatch.setenv("LDHMM_DATA", "")
    assert resolve_data_dir(None, default=default) == default  # then the default
    monkeypatch.delenv("LDHMM_DATA")
    assert resolve_data_dir(None, default=default) == default
    with pytest.raises(FileNotFoundError, match="no data directory.*LDHMM_DATA"):
        resolve_data_dir(None)  # no default: an error
    # a directory to be created (a download target) need not exist
    assert resolve_data_dir(tmp_path / "new", must_exist=False) == tmp_path / "new"
    with pytest.raises(FileNotFoundError, match="from the default"):
        resolve_data_dir(None, default=tmp_path / "missing")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_data_dir("~/arg") == arg


def test_derived_seeds():
    assert derived_seeds(0, 4) == [0, 3964924996, 3141116543, 2613022947]
    assert derived_seeds(7, 3) == [7, 369571992, 1009178997]
    assert derived_seeds(7, 1) == [7] and derived_seeds(7, 0) == []
    assert derived_seeds(7, 5)[:3] == derived_seeds(7, 3)  # more restarts keep the first ones
    assert all(type(s) is int for s in derived_seeds(np.int64(3), 3))
    assert LDHMM(2, seed=7, n_init=3).restart_seeds() == derived_seeds(7, 3)
    for bad in ((-1, 2), (1, -1)):
        with pytest.raises(ValueError, match=">= 0"):
            derived_seeds(*bad)


# ============================================================================ the database
def small_db(**kw):
    seqs = [np.array([0, 1, 2]), np.array([2]), np.array([1, 1, 0, 2, 2])]
    return SequenceDatabase.from_sequences(
        seqs,
        ["a", "b", "c"],
        labels=[0, 1, 0],
        label_names=["x", "y"],
        ids=["s1", "s2", "s3"],
        name="toy",
        **kw,
    )


def test_database_basics():
    db = small_db()
    assert len(db) == 3 and db.n_symbols == 3 and db.tokens.dtype == np.int8
    assert db.offsets.tolist() == [0, 3, 4, 9]
    assert db[2].dtype == np.int64 and db[-1].tolist() == [1, 1, 0, 2, 2]
    assert [s.tolist() for s in db.sequences] == [[0, 1, 2], [2], [1, 1, 0, 2, 2]]
    assert all(s.dtype == np.int64 for s in db.sequences)
    assert db.length_stats() == {"n": 3, "min": 1, "max": 5, "mean": 3.0, "median": 3.0, "tokens": 9}
    assert db.class_counts() == {"x": 2, "y": 1}
    sub = db.subset([2, 0])
    assert sub.ids == ["s3", "s1"] and sub.labels.tolist() == [0, 0] and sub[0].tolist() == [1, 1, 0, 2, 2]
    assert db.subset(np.array([False, True, False])).ids == ["s2"]
    assert len(db.subset([])) == 0
    assert db.filter_length(min_length=2).ids == ["s1", "s3"]
    assert db.filter_length(max_length=3).ids == ["s1", "s2"]
    assert db.sample(2, seed=1) == db.sample(2, seed=1)
    assert "3 sequences" in db.summary() and "x 2" in db.summary()
    with pytest.raises(IndexError):
        db[3]
    with pytest.raises(TypeError, match="subset"):
        db[0:2]
    with pytest.raises(ValueError, match="cannot sample"):
        db.sample(4)
    with pytest.raises(ValueError):
        db.filter_length(5, 2)
    with pytest.raises(ValueError, match="read-only"):
        db.tokens[0] = 1


def test_database_validation():
    with pytest.raises(ValueError, match="at least one symbol"):
        SequenceDatabase.from_sequences([np.array([], dtype=int)], ["a"])
    with pytest.raises(ValueError, match="outside"):
        SequenceDatabase.from_sequences([np.array([0, 3])], ["a", "b"])
    with pytest.raises(ValueError, match="duplicate"):
        SequenceDatabase.from_sequences([np.array([0])], ["a", "a"])
    with pytest.raises(ValueError, match="label_names"):
        SequenceDatabase.from_sequences([np.array([0])], ["a"], labels=[0])
    big = SequenceDatabase.from_sequences([np.array([0, 299])], [str(i) for i in range(300)])
    assert big.tokens.dtype == np.int16


def test_text_round_trip(tmp_path):
    db = small_db()
    path = tmp_path / "toy.txt"
    db.to_text(path)
    text = path.read_text()
    assert text.splitlines()[0] == "# ldhmm-sequences 1"
    assert "s1 x a b c" in text.splitlines()
    assert SequenceDatabase.from_text(path) == db
    plain = SequenceDatabase.from_sequences([np.array([1, 0])], ["on-air", "news"], name="")
    plain.to_text(path)
    assert SequenceDatabase.from_text(path) == plain
    with pytest.raises(ValueError, match="white space"):
        SequenceDatabase.from_sequences([np.array([0])], ["two words"]).to_text(tmp_path / "bad.txt")


@needs_data
def test_text_round_trip_real_data(tmp_path):
    splice = load_splice(DATA)
    splice.to_text(tmp_path / "splice.txt")
    assert SequenceDatabase.from_text(tmp_path / "splice.txt") == splice
    entree = load_paper_subset("entree", DATA)
    entree.to_text(tmp_path / "entree.txt")
    assert SequenceDatabase.from_text(tmp_path / "entree.txt") == entree


names = st.text(
    alphabet=st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")), min_size=1, max_size=6
).filter(lambda s: not s.startswith("#") and s.split() == [s])


@st.composite
def databases(draw):
    vocab = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    m = draw(st.integers(0, 8))
    seqs = [
        np.array(draw(st.lists(st.integers(0, len(vocab) - 1), min_size=1, max_size=10))) for _ in range(m)
    ]
    kw = {}
    if draw(st.booleans()):
        label_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
        kw["labels"] = draw(st.lists(st.integers(0, len(label_names) - 1), min_size=m, max_size=m))
        kw["label_names"] = label_names
    if draw(st.booleans()):
        kw["ids"] = draw(st.lists(names, min_size=m, max_size=m))
    name = draw(st.text(max_size=10).filter(lambda s: s == s.strip() and len(s.splitlines()) <= 1))
    return SequenceDatabase.from_sequences(seqs, vocab, name=name, **kw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(db=databases())
def test_text_round_trip_property(tmp_path, db):
    path = tmp_path / "db.txt"
    db.to_text(path)
    assert SequenceDatabase.from_text(path) == db


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(lambda s: s.encode("utf-8")),
        st.lists(
            st.sampled_from(
                [
                    "# ldhmm-sequences 1",
                    "# vocabulary: a b",
                    "# columns: id label tokens",
                    "# label_names: x y",
                    "# columns: label tokens",
                    "a b",
                    "x a",
                    "i x a b",
                    "",
                    "#",
                    "c",
                    "y b a",
                    "\t",
                    "# name: n",
                    "x",
                    "\xff",
                ]
            ),
            max_size=8,
        ).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
    )
)
def test_text_parser_garbage(tmp_path, body):
    path = tmp_path / "garbage.txt"
    path.write_bytes(body)
    try:
        db = SequenceDatabase.from_text(path)
    except DataFormatError as err:
        assert str(path) in str(err)
        return
    assert isinstance(db, SequenceDatabase)
    assert all(len(s) >= 1 for s in db.sequences)
    assert all(int(s.max()) < db.n_symbols for s in db.sequences)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(
        st.binary(max_size=120), st.text(alphabet="% 0123456789abx\r\n\t-", max_size=120).map(str.encode)
    )
)
def test_msnbc_and_splice_parsers_garbage(tmp_path, body):
    for reader in (read_msnbc, read_splice):
        path = tmp_path / "garbage.data"
        path.write_bytes(body)
        try:
            db = reader(path)
        except DataFormatError:
            continue
        assert len(db) >= 1


# ============================================================================ bad input
def test_msnbc_synthetic_plain_and_gzip(tmp_path):
    lines = ["1 2 3", "3", "2 2"]
    for compress in (False, True):
        db = read_msnbc(write_msnbc(tmp_path / "m.seq", lines, compress))
        assert db.vocabulary == ["frontpage", "news", "tech"]
        assert [s.tolist() for s in db.sequences] == [[0, 1, 2], [2], [1, 1]]


def test_msnbc_non_numeric_token(tmp_path):
    lines = ["1 2"] * 2000 + ["1 x 3"] + ["2"] * 10
    for chunk in (1 << 20, 64):  # one chunk, and many chunks
        with pytest.raises(DataFormatError) as info:
            read_msnbc(write_msnbc(tmp_path / "m.seq", lines), chunk_bytes=chunk)
        assert info.value.line == 7 + 2001
        assert f"m.seq:{7 + 2001}:" in str(info.value) and "'x'" in str(info.value)


def test_msnbc_code_out_of_range(tmp_path):
    with pytest.raises(DataFormatError, match=r"m\.seq:9: category code 4 is outside 1\.\.3"):
        read_msnbc(write_msnbc(tmp_path / "m.seq", ["1", "1 4"]))


def test_msnbc_truncated_gzip(tmp_path):
    lines = [" ".join(str(1 + (i * 7 + j) % 3) for j in range(1 + i % 9)) for i in range(30000)]
    path = write_msnbc(tmp_path / "m.seq.gz", lines, compress=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFormatError, match="truncated or corrupt gzip") as info:
        read_msnbc(path)
    assert info.value.path == str(path) and info.value.line is not None


@needs_data
def test_msnbc_real_truncated_gzip(tmp_path):
    truncated = tmp_path / "msnbc990928.seq.gz"
    truncated.write_bytes((DATA / "msnbc990928.seq.gz").read_bytes()[:200_000])
    with pytest.raises(DataFormatError, match=r"msnbc990928\.seq\.gz:\d+: truncated"):
        load_msnbc(tmp_path)


def test_empty_files(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for reader in (read_msnbc, read_splice, SequenceDatabase.from_text):
        with pytest.raises(DataFormatError, match="empty"):
            reader(empty)
    header_only = write_msnbc(tmp_path / "h.seq", [])
    with pytest.raises(DataFormatError, match="no sequences"):
        read_msnbc(header_only)


def test_splice_bad_lines(tmp_path):
    good = "EI,    ATRINS-DONOR-521,               CCAGCTGCAT\n"
    path = tmp_path / "splice.data"
    path.write_text(good + good + "IE,    MISSING-FIELD\n" + good)
    with pytest.raises(DataFormatError, match=r"splice\.data:3: expected 3 comma-separated fields") as info:
        read_splice(path)
    assert info.value.line == 3
    path.write_text(good + "XX, NAME, ACGT\n")
    with pytest.raises(DataFormatError, match=r":2: class 'XX'"):
        read_splice(path)
    path.write_text(good + "EI, NAME, ACGZ\n")
    with pytest.raises(DataFormatError, match=r":2: 'Z' is not a base"):
        read_splice(path)


def test_entree_bad_session(tmp_path):
    session = tmp_path / "entree" / "session"
    session.mkdir(parents=True)
    ok = "07/Sep/1996:12:17:05 \thost\t0\t560L\t110N\t110\n"
    (session / "session.1996-Q3").write_text(ok)
    (session / "session.1996-Q4").write_text(ok + ok + "07/Sep/1996:12:17:05 \thost\t0\t560L\t11ZZ\t110\n")
    with pytest.raises(DataFormatError, match=r"session\.1996-Q4:3: navigation step '11ZZ'"):
        load_entree(tmp_path)
    (session / "session.1996-Q4").write_text(ok + "07/Sep/1996:12:17:05 \thost\t0\t560T\t110\n")
    with pytest.raises(DataFormatError, match="alphabet='codebook'"):
        load_entree(tmp_path)
    db = load_entree(tmp_path, alphabet="codebook")
    assert [s.tolist() for s in db.sequences] == [[0, 2], [0, 2], [8]]
    assert db.ids == ["session.1996-Q3:1", "session.1996-Q4:1", "session.1996-Q4:2"]
    # the same from an archive
    (session / "session.1996-Q4").write_text(ok)
    archive_dir = tmp_path / "arch"
    archive_dir.mkdir()
    with tarfile.open(archive_dir / "entree_data.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "entree", arcname="entree")
    assert load_entree(archive_dir) == load_entree(tmp_path)
    broken = archive_dir / "entree_data.tar.gz"
    broken.write_bytes(broken.read_bytes()[:100])
    with pytest.raises(DataFormatError, match="corrupt archive"):
        load_entree(archive_dir)


# ============================================================================ splits
def test_kfold_indices():
    folds = kfold_indices(103, n_folds=10, seed=5)
    assert len(folds) == 10
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(103))
    for tr, te in folds:
        assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == 103
    again = kfold_indices(103, n_folds=10, seed=5)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    other = kfold_indices(103, n_folds=10, seed=6)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)
    for _train, te in kfold_indices(labels, n_folds=10, seed=0):
        assert np.bincount(labels[te], minlength=3).tolist() == [6, 3, 1]
    db = small_db()
    assert len(kfold_indices(db, n_folds=2, stratify=False)) == 2
    with pytest.raises(ValueError, match="at least 2"):
        kfold_indices(10, n_folds=1)
    with pytest.raises(ValueError, match="more than the number"):
        kfold_indices(5, n_folds=6)
    with pytest.raises(ValueError, match="stratify"):
        kfold_indices([0, 0, 0, 1], n_folds=2)


# ============================================================================ fetch
def _file_url(path: Path) -> str:
    return path.resolve().as_uri()


def test_fetch_file_url_plain_zip_and_mismatch(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    payload = b"EI, NAME-1, ACGTACGT\nN, NAME-2, TTTTAAAA\n"
    (src / "splice.data").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    with zipfile.ZipFile(src / "splice.zip", "w") as zf:
        zf.writestr("__MACOSX/._splice.data", b"junk")
        zf.writestr("splice.data", payload)

    out = tmp_path / "data"
    saved = fetch("splice", out, url=_file_url(src / "splice.data"), sha256=digest, quiet=True)
    assert saved == out / "splice.data" and saved.read_bytes() == payload
    assert len(load_splice(out)) == 2
    assert sorted(p.name for p in out.iterdir()) == ["splice.data"]
    # the permissions open() gives a new file, not the temporary file's owner-only ones
    plain = tmp_path / "plain"
    plain.write_bytes(payload)
    assert saved.stat().st_mode == plain.stat().st_mode

    out2 = tmp_path / "data2"
    fetch("splice", out2, url=_file_url(src / "splice.zip"), sha256=digest, quiet=True)
    assert (out2 / "splice.data").read_bytes() == payload

    out3 = tmp_path / "data3"
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        fetch("splice", out3, url=_file_url(src / "splice.zip"), sha256="0" * 64, quiet=True)
    assert list(out3.iterdir()) == []  # nothing left behind


def test_fetch_msnbc_gzip_checks_content(tmp_path):
    plain = write_msnbc(tmp_path / "msnbc990928.seq", ["1 2", "3"])
    digest = hashlib.sha256(plain.read_bytes()).hexdigest()
    gz = tmp_path / "upload.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    out = tmp_path / "data"
    saved = fetch("msnbc", out, url=_file_url(gz), sha256=digest, quiet=True)
    assert saved.name == "msnbc990928.seq.gz"
    assert len(load_msnbc(out)) == 2


def test_fetch_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="unknown data set"):
        fetch("iris", tmp_path)


# ============================================================================ CLI
def _run_cli(argv):
    parser = argparse.ArgumentParser(prog="ldhmm")
    add_command(parser.add_subparsers(dest="command"), "data", data_command)
    args = parser.parse_args(argv)
    return args.func(args)


@needs_data
def test_cli_info_dataset(capsys):
    rc = _run_cli(["data", "info", "splice", "--data-dir", str(DATA)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "3190 sequences" in out and "EI 767, IE 768, N 1655" in out
    assert "vocabulary (4 symbols)" in out and "length histogram" in out
    rc = _run_cli(
        ["data", "info", "entree", "--data-dir", str(DATA), "--min-length", "20", "--max-length", "59"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "422 sequences" in out and "browse" in out


def test_cli_info_file_and_corrupt(tmp_path, capsys):
    db = small_db()
    db.to_text(tmp_path / "toy.txt")
    assert _run_cli(["data", "info", str(tmp_path / "toy.txt")]) == 0
    assert "3 sequences" in capsys.readouterr().out
    bad = tmp_path / "splice.data"
    bad.write_text("EI, A, ACGT\nEI, B\n")
    rc = _run_cli(["data", "info", str(bad)])
    captured = capsys.readouterr()
    assert rc != 0
    assert captured.err.count("\n") == 1 and f"{bad}:2:" in captured.err
    assert "Traceback" not in captured.err


def test_cli_subprocess_no_traceback(tmp_path):
    bad = write_msnbc(tmp_path / "m.seq", ["1 2", "1 oops"])
    proc = subprocess.run(
        [sys.executable, "-m", "ldhmm.cli", "data", "info", str(bad)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and f"{bad}:9:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_fetch_file_url(tmp_path, capsys):
    payload = b"EI, NAME-1, ACGT\n"
    src = tmp_path / "splice.data"
    src.write_bytes(payload)
    out = tmp_path / "data"
    rc = _run_cli(
        [
            "data",
            "fetch",
            "splice",
            "--data-dir",
            str(out),
            "--url",
            _file_url(src),
            "--quiet",
            "--sha256",
            hashlib.sha256(payload).hexdigest(),
        ]
    )
    assert rc == 0 and (out / "splice.data").is_file()
    rc = _run_cli(
        ["data", "fetch", "splice", "--data-dir", str(tmp_path / "d2"), "--url", _file_url(src), "--quiet"]
    )
    err = capsys.readouterr().err
    assert rc != 0 and "checksum mismatch" in err and err.count("\n") == 1


def test_cli_fetch_needs_a_data_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LDHMM_DATA", raising=False)
    rc = _run_cli(["data", "fetch", "splice", "--url", _file_url(tmp_path / "x"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--data-dir" in err and "LDHMM_DATA" in err
    monkeypatch.setenv("LDHMM_DATA", str(tmp_path / "from-env"))  # created by the fetch
    payload = b"EI, NAME-1, ACGT\n"
    (tmp_path / "splice.data").write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    args = [
        "data",
        "fetch",
        "splice",
        "--url",
        _file_url(tmp_path / "splice.data"),
        "--quiet",
        "--sha256",
        digest,
    ]
    assert _run_cli(args) == 0 and (tmp_path / "from-env" / "splice.data").read_bytes() == payload
