"""The one store of per-sequence state (``inference/state_store.py``), which checkpoints, fits
along K (``ldhmm fit --states a..b``) and the harness's fits along K write and read: every field
checked on read, in one line naming the file and the field and how to start over; and the files
of the code before the store (a checkpoint's state file without a manifest, a path's state file
of format ``ldhmm-path-state``) still resume, to the numbers of an uninterrupted run.

``tests/fixtures/state_store_v0/`` holds two files written by the code before the store (a path's
K = 2 state of an FF fit, a checkpoint's state file after EM iteration 4), made with the commit
before it; the resume tests rewrite the files a run writes in the old layouts
(:func:`_as_old_path_file`, :func:`_as_old_checkpoint_file`: the old writers' layouts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ldhmm
from ldhmm import LDHMM
from ldhmm.cli import fit_path as fit_path_cli
from ldhmm.cli import main
from ldhmm.experiments import along_k
from ldhmm.inference.checkpoint import STATE_EVERY, CheckpointError
from ldhmm.inference.distributed.workers import PartitionWorker
from ldhmm.inference.state_store import (
    CHECKPOINT_ARRAYS,
    STATE_FORMAT,
    StateFileError,
    read_states,
    write_states,
)
from ldhmm.models import fit_starts

FIXTURES = Path(__file__).parent / "fixtures" / "state_store_v0"
AGAIN = "do it again"


def _parts(dtype=np.float64, K=2, W=3):
    """Two partitions: buckets of M = 3 (T = 4) and M = 2 (T = 2), and of M = 1 (no marginals)."""
    rng = np.random.default_rng(0)

    def bucket(M, T, phi=True):
        out = {
            "counts_pi": rng.random((M, K)),
            "counts_A": rng.random((M, K, K)),
            "counts_B": rng.random((M, K, W)),
            "entropy": rng.random(M),
            "elbo": -rng.random(M),
            "local_elbo": -rng.random(M),
        }
        if phi:
            out["phi"] = rng.random((M, T, K))
        return {k: v.astype(dtype) for k, v in out.items()}

    return [[bucket(3, 4), bucket(2, 2)], [bucket(1, 5, phi=False)]]


def _read(path, **kw):
    options = {"n_states": 2, "owner": {"sha256": "abc"}, "start_over": AGAIN, **kw}
    return read_states(path, **options)


def _stored(path) -> tuple[dict, dict]:
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return arrays, json.loads(arrays.pop("manifest").tobytes())


def _store(path, arrays, manifest) -> None:
    raw = json.dumps(manifest).encode() if not isinstance(manifest, bytes) else manifest
    np.savez(path, **arrays, manifest=np.frombuffer(raw, np.uint8))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_state_round_trips_bit_for_bit(tmp_path, dtype):
    parts = _parts(dtype)
    write_states(tmp_path / "s.npz", parts, 2, {"sha256": "abc", "run": 1})
    back = _read(tmp_path / "s.npz", dtype=dtype, required=CHECKPOINT_ARRAYS, n_partitions=2)
    assert [[sorted(b) for b in p] for p in back] == [[sorted(b) for b in p] for p in parts]
    for p, part in enumerate(parts):
        for b, bucket in enumerate(part):
            for name, value in bucket.items():
                assert back[p][b][name].dtype == dtype
                np.testing.assert_array_equal(back[p][b][name], value)
    _, manifest = _stored(tmp_path / "s.npz")
    assert manifest["format"] == STATE_FORMAT and manifest["version"] == 1
    assert manifest["dtype"] == np.dtype(dtype).name and manifest["owner"] == {"sha256": "abc", "run": 1}
    assert len(list(tmp_path.iterdir())) == 1  # written atomically: no temporary file left


def _nan(a, m):
    a["p0/b1/counts_A"] = a["p0/b1/counts_A"].copy()
    a["p0/b1/counts_A"][0, 0, 0] = np.nan


def _set(key, value):
    return lambda a, m: a.update({key: value})


def _meta(field, value):
    return lambda a, m: m.update({field: value})


def _unlisted(a, m):
    m["parts"][0][0].remove("counts_B")
    a.pop("p0/b0/counts_B")


CHANGES = {
    "empty manifest": (lambda a, m: m.clear(), r"field 'format', 'version': \(None, None\)"),
    "format": (_meta("format", "other"), r"field 'format', 'version': \('other', 1\)"),
    "version": (_meta("version", 2), r"field 'format', 'version': \('ldhmm-sequence-state', 2\)"),
    "K": (_meta("n_states", 3), "field 'n_states': K = 3 there, 2 here"),
    "K-text": (_meta("n_states", "two"), "field 'n_states' is 'two', not a K >= 1"),
    "dtype-field": (_meta("dtype", "int8"), "field 'dtype' is 'int8', not float64 or float32"),
    "parts": (_meta("parts", [["counts_pi"]]), "field 'parts' is not a list of partitions"),
    "no owner": (lambda a, m: m.pop("owner"), "field 'owner' missing"),
    "owner": (
        _meta("owner", {"sha256": "def"}),
        r"field 'owner.sha256' is 'def' there, 'abc' here \(the state",
    ),
    "listed, not stored": (lambda a, m: a.pop("p0/b1/phi"), "no array 'p0/b1/phi'"),
    "stored, not listed": (
        _set("p0/b7/counts_pi", np.ones((1, 2))),
        "array 'p0/b7/counts_pi' is not one the",
    ),
    "required": (_unlisted, "no array 'p0/b0/counts_B'"),
    "NaN": (_nan, "array 'p0/b1/counts_A' holds NaN"),
    "inf": (_set("p1/b0/elbo", np.array([np.inf])), "array 'p1/b0/elbo' holds an infinite value"),
    "negative": (_set("p0/b0/phi", -np.ones((3, 4, 2))), r"array 'p0/b0/phi' holds a negative count \(-1\)"),
    "K-shape": (
        _set("p0/b0/counts_A", np.ones((3, 3, 3))),
        r"array 'p0/b0/counts_A' of shape \(3, 3, 3\): the",
    ),
    "M-shape": (
        _set("p0/b1/entropy", np.ones(5)),
        r"array 'p0/b1/entropy' of shape \(5,\): the state has K = 2 a",
    ),
    "float32": (
        _set("p0/b0/elbo", np.ones(3, np.float32)),
        "array 'p0/b0/elbo' holds float32 values, the fit f",
    ),
    "int": (
        _set("p0/b0/elbo", np.ones(3, np.int64)),
        "array 'p0/b0/elbo': holds int64 values; a state file's",
    ),
    "stranger": (_set("weights", np.ones(3)), "array 'weights': not an array of a state file"),
    "stranger in a bucket": (_set("p0/b0/weights", np.ones(3)), "array 'p0/b0/weights': not an array of a"),
    "4-D": (_set("p0/b0/phi", np.ones((3, 4, 2, 1))), "array 'p0/b0/phi': has 4 dimensions"),
}


@pytest.mark.parametrize("change, says", CHANGES.values(), ids=CHANGES.keys())
def test_every_field_is_checked_in_one_line_naming_the_file_and_how_to_start_over(tmp_path, change, says):
    path = tmp_path / "s.npz"
    write_states(path, _parts(), 2, {"sha256": "abc"})
    arrays, manifest = _stored(path)
    change(arrays, manifest)
    _store(path, arrays, manifest)
    with pytest.raises(StateFileError, match=says) as caught:
        _read(path, n_partitions=2)
    message = str(caught.value)
    assert (
        message.startswith(f"state file {path}: ") and message.endswith(f": {AGAIN}") and "\n" not in message
    )


def test_the_archive_is_read_through_the_hardened_reader(tmp_path):
    path = tmp_path / "s.npz"
    write_states(path, _parts(), 2, {"sha256": "abc"})
    arrays, manifest = _stored(path)
    with pytest.raises(StateFileError, match="field 'parts': 2 partitions, the fit has 1: do it again"):
        _read(path, n_partitions=1)
    with pytest.raises(StateFileError, match="field 'dtype' is float64, the fit float32"):
        _read(path, dtype=np.float32)
    _store(path, arrays, b"[1, 2")
    with pytest.raises(StateFileError, match="array 'manifest' is not JSON"):
        _read(path)
    np.savez_compressed(path, **arrays)
    with pytest.raises(StateFileError, match="is compressed; a state file stores its arrays uncompressed"):
        _read(path)
    path.write_bytes(b"no zip")
    with pytest.raises(StateFileError, match=r"not a state file \(not an NPZ archive"):
        _read(path)
    with pytest.raises(FileNotFoundError):
        _read(tmp_path / "none.npz")


# ------------------------------------------------------------------ files of before the store


def test_a_path_state_file_of_the_code_before_the_store_is_read():
    path = FIXTURES / "path_state_K2.npz"
    with np.load(path) as npz:
        old = {k: npz[k] for k in npz.files}
    assert str(old["format"]) == "ldhmm-path-state" and int(old["version"]) == 1
    sha = str(old["sha256"])
    parts = _read(path, owner={"sha256": sha}, n_partitions=1, legacy=("path",))
    assert len(parts) == 1 and len(parts[0]) == int(old["n_buckets"]) == 2
    for b, bucket in enumerate(parts[0]):
        assert sorted(bucket) == ["counts_A", "counts_B", "counts_pi", "phi"]  # an FF fit's
        for g in ("pi", "A", "B", "phi"):
            np.testing.assert_array_equal(bucket[g if g == "phi" else f"counts_{g}"], old[f"{g}_{b}"])
    with pytest.raises(StateFileError, match="array 'format': not an array of a state file"):
        _read(path, owner={"sha256": sha})  # not where a path's file is not expected
    with pytest.raises(StateFileError, match="field 'n_states': K = 2 there, 3 here"):
        _read(path, n_states=3, owner={"sha256": sha}, legacy=("path",))
    with pytest.raises(StateFileError, match="field 'owner.sha256' is '[0-9a-f]{64}' there, '0+' here"):
        _read(path, owner={"sha256": "0" * 64}, legacy=("path",))


@pytest.mark.parametrize(
    "change, says",
    [
        ({"A_0": lambda a: -a - 1.0}, r"array 'A_0' holds a negative count \(-"),
        ({"phi_1": lambda a: a[..., :1]}, r"array 'phi_1' of shape \(4, 6, 1\)"),
        ({"n_buckets": lambda a: np.array("two")}, "array 'n_buckets' holds <U3 values, not numbers"),
        ({"n_buckets": lambda a: np.array(1)}, r"array '\w+_1': the file has 1 buckets"),
        ({"version": lambda a: np.array(2)}, "field 'format', 'version': not a path state file"),
        ({"B_0": None}, "no array 'B_0'"),
        ({"sha256": None}, "no array 'sha256'"),
    ],
    ids=["negative", "shape", "n_buckets-text", "n_buckets", "version", "no-B", "no-sha256"],
)
def test_a_damaged_path_state_file_of_before_is_refused_naming_its_member(tmp_path, change, says):
    with np.load(FIXTURES / "path_state_K2.npz") as npz:
        old = {k: npz[k] for k in npz.files}
    for key, how in change.items():
        if how is None:
            old.pop(key)
        else:
            old[key] = how(old[key])
    np.savez(tmp_path / "K2.state.npz", **old)
    with pytest.raises(StateFileError, match=says) as caught:
        _read(tmp_path / "K2.state.npz", owner=None, legacy=("path",))
    assert str(caught.value).endswith(AGAIN)


def test_a_checkpoint_state_file_of_before_the_store_is_read_as_a_checkpoint_s():
    path = FIXTURES / "checkpoint.state.r0.i4.npz"
    with np.load(path) as npz:
        old = {k: npz[k] for k in npz.files}
    options = {"required": CHECKPOINT_ARRAYS, "dtype": np.float64, "n_partitions": 1}
    parts = _read(path, legacy=("checkpoint",), **options)
    assert len(parts[0]) == 2
    for key, value in old.items():
        p, b, name = key.split("/")
        np.testing.assert_array_equal(parts[int(p[1:])][int(b[1:])][name], value)
    with pytest.raises(StateFileError, match="no array 'manifest' \\(not an ldhmm state file\\)"):
        _read(path, **options)
    with pytest.raises(
        StateFileError, match="array 'p0/b0/counts_A' of shape \\(4, 2, 2\\): the state has K = 3"
    ):
        _read(path, n_states=3, legacy=("checkpoint",), **options)


# ------------------------------------------------------------------ resumed, as before


def _as_old_checkpoint_file(path) -> None:
    """The checkpoint's state file ``path`` as the code before the store wrote it: its arrays, no manifest."""
    arrays, _ = _stored(path)
    np.savez(path, **arrays)


def _as_old_path_file(path) -> None:
    """The path state file ``path`` as the code before the store wrote it (``save_path_state``:
    format ``ldhmm-path-state`` version 1, one partition's counts and marginals by bucket)."""
    arrays, manifest = _stored(path)
    buckets = manifest["parts"][0]
    old = {
        "format": np.array("ldhmm-path-state"),
        "version": np.array(1),
        "n_states": np.array(manifest["n_states"]),
        "n_buckets": np.array(len(buckets)),
        "sha256": np.array(manifest["owner"]["sha256"]),
    }
    for b, names in enumerate(buckets):
        for name in names:
            old[f"{name.removeprefix('counts_')}_{b}"] = arrays[f"p0/b{b}/{name}"]
    np.savez(path, **old)


def _data(n=40, V=5):
    rng = np.random.default_rng(1)
    return [rng.integers(0, V, size=rng.integers(2, 15)) for _ in range(n)]


class Stop(Exception):
    """A simulated kill."""


def _model(seed=0):
    return LDHMM(2, seed=seed, n_init=1, max_iter=9, tol=1e-12, effort="thorough")


def _killed_after_a_state_file(monkeypatch, model, seqs, directory):
    """Fit ``model`` with a checkpoint in ``directory``, killed at the E-step after its first state file."""
    e_steps, real = [], PartitionWorker.e_step

    def stopped(self, *args, **kwargs):
        e_steps.append(1)
        if len(e_steps) > STATE_EVERY + 1:
            raise Stop
        return real(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(PartitionWorker, "e_step", stopped)
        with pytest.raises(Stop):
            model.fit(seqs, checkpoint=directory)
    return directory / f"checkpoint.state.r0.i{STATE_EVERY}.npz"


def test_a_checkpoint_written_before_the_store_resumes_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    seqs, ck = _data(), tmp_path / "ck"
    expected = _model().fit(seqs)
    _as_old_checkpoint_file(_killed_after_a_state_file(monkeypatch, _model(), seqs, ck))
    done = _model().fit(seqs, checkpoint=ck)
    np.testing.assert_array_equal(done.elbo_history_, expected.elbo_history_)
    assert done.elbo_trace_ == expected.elbo_trace_
    for g, t in expected.params_.prior.items():
        assert np.array_equal(done.params_.prior[g].numpy(), t.numpy()), g


def test_a_checkpoint_state_file_of_another_fit_is_refused_in_one_line(tmp_path, monkeypatch):
    seqs = _data()
    other = _killed_after_a_state_file(monkeypatch, _model(seed=5), seqs, tmp_path / "other")
    mine = _killed_after_a_state_file(monkeypatch, _model(), seqs, tmp_path / "ck")
    mine.write_bytes(other.read_bytes())  # the same shapes, another fit's
    with pytest.raises(
        CheckpointError, match=r"field 'owner.fit' is '[0-9a-f]+' there, .*start over with --force"
    ):
        _model().fit(seqs, checkpoint=tmp_path / "ck")


def _log(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join(f"s{t}" for t in s) for s in _data(n=40)) + "\n")
    return path


def test_a_path_directory_written_before_the_store_resumes_to_the_uninterrupted_models(
    tmp_path, capsys, monkeypatch
):
    log = _log(tmp_path)
    argv = ["fit", str(log), "--states", "2..3", "--restarts", "1", "--max-iter", "6", "--quiet", "--out"]
    assert main([*argv, str(tmp_path / "ref")]) == 0
    out = tmp_path / "cut"

    def ctrl_c(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(fit_starts, "continue_grown", ctrl_c)  # while growing K = 3
        assert main([*argv, str(out)]) == 130
    _as_old_path_file(out / "K2.state.npz")
    read = []
    real = fit_path_cli.load_path_state
    monkeypatch.setattr(fit_path_cli, "load_path_state", lambda *a: read.append(a[1].name) or real(*a))
    capsys.readouterr()
    assert main([*argv, str(out)]) == 0, capsys.readouterr().err
    assert read == ["K2.state.npz"]
    mine = json.loads((out / "K3.json").read_text())
    ref = json.loads((tmp_path / "ref" / "K3.json").read_text())
    assert mine["prior"] == ref["prior"] and mine["elbo_history"] == ref["elbo_history"]
    # a state file that cannot be read: one line, how to start over
    (out / "K3.json").unlink()
    (out / "K2.state.npz").write_bytes(b"damaged")
    capsys.readouterr()
    assert main([*argv, str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "K2.state.npz: not a path state file" in err
    assert err.rstrip().endswith(f"delete {out} or choose another --out"), err


def test_a_harness_run_written_before_the_store_resumes_from_its_states(tmp_path, monkeypatch):
    """One fold's state rewritten in the old layout resumes from it; the other's, damaged, is
    refused and that fold's path refitted from its first K: both give the uninterrupted rows."""
    settings = dict(states=[2, 3], is_samples=2, folds=2, n_sequences=30, max_iter=2, restarts=1, quiet=True)
    ref = ldhmm.compare(["LDHMM-PF"], "synthetic", out=tmp_path / "ref", seed=0, **settings)
    out = tmp_path / "run"

    def failure(*args):
        raise RuntimeError("injected failure while growing K = 3")

    with monkeypatch.context() as m:
        m.setattr(fit_starts, "continue_grown", failure)
        assert not ldhmm.compare(["LDHMM-PF"], "synthetic", out=out, seed=0, **settings).ok
    old, damaged = sorted(out.rglob("*.state.npz"))
    _as_old_path_file(old)
    damaged.write_bytes(b"damaged")
    read = []
    real = along_k.FitStore.load_state
    monkeypatch.setattr(
        along_k.FitStore, "load_state", lambda s, K, m: read.append(real(s, K, m)) or read[-1]
    )
    resumed = ldhmm.compare(["LDHMM-PF"], "synthetic", out=out, seed=0, **settings)
    assert resumed.ok and sorted(read) == [False, True]

    def scores(df):
        return df.drop(columns=[c for c in df if c.endswith("_seconds")]).reset_index(drop=True)

    pd.testing.assert_frame_equal(scores(resumed.folds), scores(ref.folds), check_exact=True)
