"""Hostile checkpoints (issue 49): a checkpoint directory in use is locked, a checkpoint is read
through the hardened NPZ reader (a regular file, members stored, every array's key, shape, dtype
and values checked, one line naming the array and how to start over), and a fit killed again and
again makes progress (the per-sequence state is saved every few iterations) to the numbers of an
uninterrupted fit."""

from __future__ import annotations

import fcntl
import os

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.data.directory_lock import LOCK_NAME, DirectoryLockedError
from ldhmm.inference.checkpoint import CHECKPOINT_FILE, STATE_EVERY, CheckpointError
from ldhmm.inference.distributed.workers import PartitionWorker


def _data(seed=1, n=40, V=5):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=rng.integers(2, 15)) for _ in range(n)]


def _model(max_iter=9, effort="thorough"):
    return LDHMM(2, seed=0, n_init=1, max_iter=max_iter, tol=1e-12, effort=effort)


class Killed(Exception):
    """A simulated kill: raised by an E-step."""


def _kill_at_e_step(monkeypatch, calls: int) -> dict:
    """Make the ``calls``-th E-step from now raise :class:`Killed` (before it runs)."""
    seen = {"n": 0}
    original = PartitionWorker.e_step

    def e_step(self, *args, **kwargs):
        seen["n"] += 1
        if seen["n"] == calls:
            raise Killed
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PartitionWorker, "e_step", e_step)
    return seen


def _stored(directory):
    with np.load(directory / CHECKPOINT_FILE, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _hold_lock(directory, command="ldhmm fit other.txt"):
    """Hold ``directory``'s lock as another process would (a second open file description)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, f"4242\n{command}\n".encode(), 0)
    return fd


def _log(tmp_path, seqs):
    path = tmp_path / "log.txt"
    path.write_text("\n".join(" ".join(f"s{t}" for t in s) for s in seqs) + "\n")
    return path


# ------------------------------------------------------------------ the lock


def test_a_checkpoint_directory_in_use_is_refused(tmp_path):
    fd = _hold_lock(tmp_path / "ck")
    try:
        with pytest.raises(
            DirectoryLockedError,
            match=r"ck is in use by another ldhmm run \(pid 4242: ldhmm fit other.txt\); wait for it "
            r"or use another --checkpoint directory",
        ):
            _model().fit(_data(), checkpoint=tmp_path / "ck")
    finally:
        os.close(fd)
    assert not (tmp_path / "ck" / CHECKPOINT_FILE).exists()  # nothing written
    _model().fit(_data(), checkpoint=tmp_path / "ck")  # released: it runs


def test_cli_fit_on_a_locked_checkpoint_or_path_directory_is_one_line(tmp_path, capsys):
    log = _log(tmp_path, _data())
    fd = _hold_lock(tmp_path / "ck")
    fd2 = _hold_lock(tmp_path / "path")
    try:
        code = main(["fit", str(log), "--states", "2", "--quiet", "--out", str(tmp_path / "m.json"),
                     "--checkpoint", str(tmp_path / "ck")])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1, err
        assert "is in use by another ldhmm run (pid 4242" in err and "--checkpoint directory" in err
        code = main(["fit", str(log), "--states", "2..3", "--quiet", "--out", str(tmp_path / "path")])
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1 and "path is in use by another ldhmm run" in err, err
        assert "use another --out" in err
    finally:
        os.close(fd)
        os.close(fd2)
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "path" / "path.json").exists()


def test_a_checkpoint_directory_whose_name_is_not_utf8_is_locked_and_used(tmp_path, monkeypatch):
    directory = tmp_path / os.fsdecode(b"ck\xff")
    monkeypatch.setattr("sys.argv", ["ldhmm", "fit", "--checkpoint", str(directory)])
    _model().fit(_data(), checkpoint=directory)  # the lock file records the command line's bytes
    assert (directory / CHECKPOINT_FILE).is_file()


def test_the_lock_holder_s_command_is_shown_escaped(tmp_path):
    fd = _hold_lock(tmp_path / "ck", command="ldhmm fit \x1b]0;owned\x07\x1b[2J.txt")
    try:
        with pytest.raises(DirectoryLockedError) as caught:
            _model().fit(_data(), checkpoint=tmp_path / "ck")
    finally:
        os.close(fd)
    assert "\x1b" not in str(caught.value) and "\\x1b]0;owned\\x07" in str(caught.value)


# ------------------------------------------------------------------ the reader


@pytest.mark.parametrize(
    "value, says",
    [
        (np.nan, "holds NaN"),
        (np.inf, "holds an infinite value"),
        (-1.0, "holds a concentration <= 0 \\(-1\\)"),
        (0.0, "holds a concentration <= 0 \\(0\\)"),
    ],
    ids=["nan", "inf", "negative", "zero"],
)
def test_a_bad_concentration_is_refused_naming_the_array(tmp_path, value, says):
    seqs = _data()
    _model().fit(seqs, checkpoint=tmp_path / "ck")
    arrays = _stored(tmp_path / "ck")
    arrays["run0/params/prior/A"] = arrays["run0/params/prior/A"].copy()
    arrays["run0/params/prior/A"][1, 0] = value
    np.savez(tmp_path / "ck" / CHECKPOINT_FILE, **arrays)
    with pytest.raises(
        CheckpointError, match=rf"array 'run0/params/prior/A' {says}: start over with --force"
    ):
        _model().fit(seqs, checkpoint=tmp_path / "ck")


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda a: a.update({"run0/params/prior/pi": a["run0/params/prior/pi"].astype(np.int8)}),
            "holds int8",
        ),
        (
            lambda a: a.update({"run0/params/prior/pi": a["run0/params/prior/pi"].astype(np.float32)}),
            "dtype float32",
        ),
        (lambda a: a.update({"run0/params/prior/B": np.ones((2, 9))}), r"shape \(2, 9\)"),
        (
            lambda a: a.update({"run0/params/prior/pi": np.ones(3)}),
            r"claims shape \(3,\); the fit.s pi is \(2,\)",
        ),
        (lambda a: a.pop("meta"), "no array 'meta'"),
        (
            lambda a: a.update({"meta": np.frombuffer(b'{"format": 2, "runs": []}', np.uint8)}),
            "'fingerprint'",
        ),
        (lambda a: a.update({"meta": np.frombuffer(b"[1, 2", np.uint8)}), "array 'meta' is not JSON"),
        (
            lambda a: a.update({"run7/params/prior/pi": np.ones(2)}),
            "run7, a run the checkpoint does not list",
        ),
    ],
    ids=["int8", "float32", "shape", "K", "no-meta", "no-fingerprint", "meta-not-json", "stray-run"],
)
def test_a_damaged_checkpoint_is_one_line_naming_what(tmp_path, change, says):
    seqs = _data()
    _model().fit(seqs, checkpoint=tmp_path / "ck")
    arrays = _stored(tmp_path / "ck")
    change(arrays)
    np.savez(tmp_path / "ck" / CHECKPOINT_FILE, **arrays)
    with pytest.raises(CheckpointError, match=says) as caught:
        _model().fit(seqs, checkpoint=tmp_path / "ck")
    assert "start over with --force" in str(caught.value) and "\n" not in str(caught.value)


def test_a_zip_bomb_a_fifo_and_garbage_are_refused_before_reading(tmp_path):
    seqs = _data()
    ck = tmp_path / "ck"
    _model().fit(seqs, checkpoint=ck)
    arrays = _stored(ck)
    arrays["run0/params/prior/B"] = np.zeros((2, 50_000_000))  # 800 MB inflated, under 1 MB on disk
    np.savez_compressed(ck / CHECKPOINT_FILE, **arrays)
    assert (ck / CHECKPOINT_FILE).stat().st_size < 2_000_000
    with pytest.raises(CheckpointError, match="is compressed; a checkpoint stores its arrays uncompressed"):
        _model().fit(seqs, checkpoint=ck)
    os.unlink(ck / CHECKPOINT_FILE)
    os.mkfifo(ck / CHECKPOINT_FILE)  # read naively, it blocks for ever
    with pytest.raises(CheckpointError, match="is a FIFO"):
        _model().fit(seqs, checkpoint=ck)
    os.unlink(ck / CHECKPOINT_FILE)
    (ck / CHECKPOINT_FILE).write_bytes(b"not a zip at all")
    with pytest.raises(CheckpointError, match=r"not a checkpoint \(not an NPZ archive"):
        _model().fit(seqs, checkpoint=ck)


def test_a_state_file_with_nan_counts_or_missing_is_refused(tmp_path, monkeypatch):
    seqs = _data()
    ck = tmp_path / "ck"
    with monkeypatch.context() as patch:
        _kill_at_e_step(patch, STATE_EVERY + 2)
        with pytest.raises(Killed):
            _model().fit(seqs, checkpoint=ck)
    state = ck / f"checkpoint.state.r0.i{STATE_EVERY}.npz"
    assert state.is_file()
    with np.load(state) as npz:
        arrays = {k: npz[k] for k in npz.files}
    good = dict(arrays)
    arrays["p0/b0/counts_B"] = arrays["p0/b0/counts_B"].copy()
    arrays["p0/b0/counts_B"][0, 0, 0] = np.nan
    np.savez(state, **arrays)
    with pytest.raises(CheckpointError, match=r"array 'p0/b0/counts_B' holds NaN: start over with --force"):
        _model().fit(seqs, checkpoint=ck)
    arrays = dict(good, **{"p0/b0/counts_A": np.zeros((1, 2, 2))})
    np.savez(state, **arrays)
    with pytest.raises(
        CheckpointError, match=r"array 'p0/b0/counts_A' of shape \(1, 2, 2\): the state has K = 2"
    ):
        _model().fit(seqs, checkpoint=ck)
    os.unlink(state)
    with pytest.raises(CheckpointError, match="which is missing: start over with --force"):
        _model().fit(seqs, checkpoint=ck)


def test_cli_refusals_say_how_to_start_over_and_force_does(tmp_path, capsys):
    seqs = _data()
    log = _log(tmp_path, seqs)
    common = ["fit", str(log), "--states", "2", "--restarts", "1", "--max-iter", "6", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "plain.json")]) == 0
    ck = tmp_path / "ck"
    run = [*common, "--out", str(tmp_path / "m.json"), "--checkpoint", str(ck)]
    assert main(run) == 0
    arrays = _stored(ck)
    key = next(k for k in arrays if k.endswith("/prior/pi"))
    arrays[key] = np.full_like(arrays[key], np.nan)
    np.savez(ck / CHECKPOINT_FILE, **arrays)
    capsys.readouterr()
    assert main(run) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds NaN: start over with --force" in err, err
    assert "run the same command again" not in err
    assert main([*run, "--force"]) == 0
    fresh, plain = LDHMM.load(tmp_path / "m.json"), LDHMM.load(tmp_path / "plain.json")
    np.testing.assert_array_equal(fresh.elbo_history_, plain.elbo_history_)
    assert main([*common, "--force"]) == 1
    assert "--force starts a checkpointed fit over: it needs --checkpoint DIR" in capsys.readouterr().err


# ------------------------------------------------------------------ progress under kills


@pytest.mark.parametrize("effort, max_iter", [("thorough", 30), ("standard", 12)])
def test_a_fit_killed_again_and_again_makes_progress_to_the_uninterrupted_numbers(
    tmp_path, monkeypatch, effort, max_iter
):
    """Every life of the fit is killed at its 7th E-step (replays included), as a fit killed every
    few seconds would be: each resume replays fewer than STATE_EVERY E-steps, so every life adds
    iterations, and the end is the uninterrupted fit bit for bit. The default's database-level
    HMM runs are checkpointed as the fit's other runs: a kill during them loses little too."""
    seqs = _data(n=30)
    with monkeypatch.context() as patch:
        counted = _kill_at_e_step(patch, -1)  # counts, never kills
        expected = _model(max_iter, effort).fit(seqs)
    assert expected.n_iter_ == max_iter  # long enough that replaying every E-step would never end
    ck, lives, done = tmp_path / "ck", 0, None
    while done is None and lives < 40:
        lives += 1
        with monkeypatch.context() as patch:
            _kill_at_e_step(patch, 7)
            try:
                done = _model(max_iter, effort).fit(seqs, checkpoint=ck)
            except Killed:
                pass
        assert len([n for n in os.listdir(ck) if n.startswith("checkpoint.state.")]) <= 1
    assert done is not None, f"no end after {lives} lives"
    # each life runs 6 E-steps, of which fewer than STATE_EVERY replay saved ones
    assert lives <= -(-counted["n"] // (6 - (STATE_EVERY - 1))) + 1, (lives, counted["n"])
    np.testing.assert_array_equal(done.elbo_history_, expected.elbo_history_)
    np.testing.assert_array_equal(done.e_step_elbo_history_, expected.e_step_elbo_history_)
    assert done.elbo_trace_ == expected.elbo_trace_ and str(done.convergence_) == str(expected.convergence_)
    for d in ("prior", "posterior", "log_point"):
        for g, t in getattr(expected.params_, d).items():
            assert np.array_equal(getattr(done.params_, d)[g].numpy(), t.numpy()), (d, g)
    assert not [n for n in os.listdir(ck) if n.startswith("checkpoint.state.")]  # finished: none left


def test_a_parameter_of_another_shape_is_refused_at_its_header(tmp_path, monkeypatch):
    """With V among the settings (as ``ldhmm fit`` gives it), a member's claimed shape is checked
    before a byte of its data is read."""
    seqs = _data()
    model = LDHMM(2, n_symbols=5, seed=0, n_init=1, max_iter=3, effort="thorough")
    model.fit(seqs, checkpoint=tmp_path / "ck")
    arrays = _stored(tmp_path / "ck")
    arrays["run0/params/prior/B"] = np.ones((2, 700))
    np.savez(tmp_path / "ck" / CHECKPOINT_FILE, **arrays)
    read = []
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: read.append(1))
    with pytest.raises(
        CheckpointError, match=r"'run0/params/prior/B': claims shape \(2, 700\); the fit's B is \(2, 5\)"
    ):
        LDHMM(2, n_symbols=5, seed=0, n_init=1, max_iter=3, effort="thorough").fit(
            seqs, checkpoint=tmp_path / "ck"
        )
    assert not read  # no array's data was read
