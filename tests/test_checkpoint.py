"""The EM driver's checkpoint (``fit(..., checkpoint=DIR)``, ``ldhmm fit --checkpoint DIR``): a fit
stopped at any iteration of any run resumes to the numbers of the uninterrupted fit, bit for bit;
the file is NPZ without pickle, written atomically; another fit's checkpoint is refused."""

from __future__ import annotations

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli import main
from ldhmm.data import SequenceDatabase
from ldhmm.inference import VariationalEM
from ldhmm.inference.checkpoint import CHECKPOINT_FILE


def _data(seed=0, n=120, V=7):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=rng.integers(2, 20)) for _ in range(n)]


class Interrupt(Exception):
    pass


def _same(a, b, loaded=False):
    names = ("elbo_history_",) if loaded else ("elbo_history_", "e_step_elbo_history_", "init_elbo_history_")
    for name in names:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    if not loaded:
        assert a.n_iter_ == b.n_iter_ and str(a.convergence_) == str(b.convergence_)
        assert a.elbo_trace_ == b.elbo_trace_ and a.start_kind_ == b.start_kind_
        assert a.prior_capped_ == b.prior_capped_
    for d in ("prior", "posterior", "log_point"):
        da, db = getattr(a.params_, d), getattr(b.params_, d)
        assert da.keys() == db.keys()
        for g in da:
            assert da[g].dtype == db[g].dtype and np.array_equal(da[g].numpy(), db[g].numpy()), (d, g)


def _interrupt_at(monkeypatch, calls: int):
    """Make the ``calls``-th EM iteration (counted over every checkpointed run of the fit: not
    the database-level HMM's, which is fitted again on resuming) raise after its checkpoint was
    written."""
    seen = {"n": 0}
    original = VariationalEM.fit_backend

    def fit_backend(self, backend, params, callback=None, **options):
        if self.checkpoint is None:
            return original(self, backend, params, callback=callback, **options)

        def stop(n_iter, elbo):
            if callback is not None:
                callback(n_iter, elbo)
            seen["n"] += 1
            if seen["n"] == calls:
                raise Interrupt

        return original(self, backend, params, callback=stop, **options)

    monkeypatch.setattr(VariationalEM, "fit_backend", fit_backend)


@pytest.mark.parametrize(
    "make, fit_kwargs, calls",
    [
        (lambda: LDHMM(3, seed=2, n_init=2, max_iter=12, effort="thorough"), {}, 4),  # first restart, mid-run
        (lambda: LDHMM(3, seed=2, n_init=2, max_iter=12, effort="thorough"), {}, 15),  # second restart
        (
            lambda: LDHMM(2, guide="ff", seed=1, n_init=2, max_iter=6, effort="thorough"),
            {},
            13,
        ),  # FF after PF
        (lambda: LDHMM(3, seed=3, n_init=1, max_iter=8), {"n_partitions": 3}, 5),  # partitions
        (lambda: LDHMM(3, seed=2, max_iter=12), {}, 4),  # standard: the run from the HMM
        (lambda: LDHMM(3, seed=2, max_iter=12), {}, 15),  # standard: the seeded run
        (lambda: LDHMM(2, guide="ff", seed=1, max_iter=6), {}, 9),  # standard: FF after PF
    ],
    ids=["restart-1", "restart-2", "ff-after-pf", "partitioned", "hmm", "seeded", "standard-ff"],
)
def test_an_interrupted_fit_resumes_to_the_uninterrupted_numbers(
    tmp_path, monkeypatch, make, fit_kwargs, calls
):
    seqs = _data()
    expected = make().fit(seqs, **fit_kwargs)
    with monkeypatch.context() as patch:
        _interrupt_at(patch, calls)
        with pytest.raises(Interrupt):
            make().fit(seqs, checkpoint=tmp_path / "ck", **fit_kwargs)
    assert (tmp_path / "ck" / CHECKPOINT_FILE).is_file()
    with np.load(tmp_path / "ck" / CHECKPOINT_FILE, allow_pickle=False) as npz:  # no pickle inside
        assert "meta" in npz.files
    resumed = make().fit(seqs, checkpoint=tmp_path / "ck", **fit_kwargs)
    _same(resumed, expected)
    # a finished checkpoint answers at once with the same model
    _same(make().fit(seqs, checkpoint=tmp_path / "ck", **fit_kwargs), expected)


def test_another_fit_is_refused(tmp_path):
    seqs = _data(1, n=40)
    LDHMM(2, seed=0, n_init=1, max_iter=3).fit(seqs, checkpoint=tmp_path)
    # the one setting that differs is named, not the whole configuration
    differs = r"holds another fit \(config\.seed: 0 there, 1 here\): start over with --force"
    with pytest.raises(ValueError, match=differs):
        LDHMM(2, seed=1, n_init=1, max_iter=3).fit(seqs, checkpoint=tmp_path)
    # the same symbol counts and sizes, other sequences (every one reversed): the content tells
    with pytest.raises(ValueError, match=r"holds another fit \(data_sha256: '[0-9a-f]{64}' there"):
        LDHMM(2, seed=0, n_init=1, max_iter=3).fit([s[::-1] for s in seqs], checkpoint=tmp_path)
    with pytest.raises(ValueError, match=r"holds another fit \(data_sha256: "):
        LDHMM(2, seed=0, n_init=1, max_iter=3).fit(
            [s[::-1] for s in seqs], checkpoint=tmp_path, n_partitions=1
        )
    with pytest.raises(ValueError, match=r"holds another fit \((data_sha256|partitions|symbol_counts)"):
        LDHMM(2, seed=0, n_init=1, max_iter=3).fit(_data(2, n=40), checkpoint=tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        LDHMM(2, seed=0, n_init=1, max_iter=3).fit(seqs, checkpoint=tmp_path / "f")


def test_cli_fit_resumes_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    """``ldhmm fit ... --checkpoint DIR`` stopped mid-fit; the same command again writes the
    uninterrupted fit's model file."""
    seqs = _data(3, n=80)
    db = SequenceDatabase.from_sequences(seqs, [f"s{v}" for v in range(7)])
    (tmp_path / "log.txt").write_text("\n".join(" ".join(db.vocabulary[t] for t in s) for s in seqs) + "\n")
    common = [
        "fit",
        str(tmp_path / "log.txt"),
        "--states",
        "2",
        "--restarts",
        "2",
        "--max-iter",
        "8",
        "--quiet",
    ]
    assert main([*common, "--out", str(tmp_path / "plain.json")]) == 0
    resume = [*common, "--out", str(tmp_path / "resumed.json"), "--checkpoint", str(tmp_path / "ck")]
    with monkeypatch.context() as patch:
        _interrupt_at(patch, 6)
        assert main(resume) != 0
    assert "checkpoint" in capsys.readouterr().err
    assert main(resume) == 0
    _same(LDHMM.load(tmp_path / "resumed.json"), LDHMM.load(tmp_path / "plain.json"), loaded=True)
