"""Sequences a model gives probability 0: one rule decides (``inference/cavi/support.py``), and
every route applies it the same way: ``score_samples`` -inf, the other methods an
``ImpossibleSequenceError`` naming the sequence, every CLI command one line naming the
sequence and the symbol; the sequences the model can score get finite outputs."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math

import numpy as np
import pytest
import torch

from ldhmm import ParameterSharing, VariantHMM
from ldhmm.cli import main
from ldhmm.inference.cavi.support import ImpossibleSequenceError, first_impossible_event, supports
from ldhmm.inference.parameters import VariantParameters


def _brute_first(pi, A, B, seq) -> int:
    """The first event no supported state path reaches, by enumerating every path prefix."""
    K = len(pi)
    for n in range(len(seq)):
        reached = any(
            pi[p[0]]
            and all(B[p[t], seq[t]] for t in range(n + 1))
            and all(A[p[t - 1], p[t]] for t in range(1, n + 1))
            for p in itertools.product(range(K), repeat=n + 1)
        )
        if not reached:
            return n
    return -1


def _random_support(rng, shape, p_zero=0.45):
    s = rng.random(shape) > p_zero
    rows = s.reshape(-1, shape[-1])
    for r in rows:  # a normalized row has a positive entry
        if not r.any():
            r[rng.integers(shape[-1])] = True
    return rows.reshape(shape)


def test_the_support_recursion_agrees_with_enumerating_every_path():
    rng = np.random.default_rng(0)
    checked = impossible = 0
    for _ in range(150):
        K, V = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        pi, A, B = _random_support(rng, (K,)), _random_support(rng, (K, K)), _random_support(rng, (K, V))
        if rng.random() < 0.3:
            pi, A = np.ones_like(pi), np.ones_like(A)  # the emissions-only shortcut
        seqs = [rng.integers(0, V, int(rng.integers(1, 6))) for _ in range(6)]
        L = max(len(s) for s in seqs)
        tokens = np.zeros((len(seqs), L), dtype=np.int64)
        mask = np.zeros((len(seqs), L), dtype=bool)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)], mask[i, : len(s)] = s, True
        got = first_impossible_event((pi, A, B), tokens, mask)
        want = [_brute_first(pi, A, B, s) for s in seqs]
        np.testing.assert_array_equal(got, want)
        checked += len(seqs)
        impossible += int((got >= 0).sum())
    assert 0 < impossible < checked  # both kinds were tried


def _all_point_model(log_pi, log_A, log_B, vocabulary=None) -> VariantHMM:
    sharing = ParameterSharing(pi="point", A="point", B="point")
    K, V = np.shape(log_B)
    model = VariantHMM(K, n_symbols=V, sharing=sharing, seed=0, max_iter=1)
    model.fit([np.arange(V)])
    point = {
        g: torch.tensor(np.asarray(v, dtype=np.float64))
        for g, v in zip("pi A B".split(), (log_pi, log_A, log_B))
    }
    model._set_params(VariantParameters(sharing, {}, {}, point))
    if vocabulary is not None:
        model.vocabulary_ = list(vocabulary)
    return model


NEG = -math.inf
#: state 0 emits a, state 1 emits b; the chain starts in 0 and alternates: "a b a b" only
#: (state 1 emits b or c, each with probability 1/2)
ALTERNATING = ([0.0, NEG], [[NEG, 0.0], [0.0, NEG]], [[0.0, NEG, NEG], [NEG, math.log(0.5), math.log(0.5)]])


@pytest.fixture(scope="module")
def alternating():
    return _all_point_model(*ALTERNATING, vocabulary="abc")


def test_every_method_applies_the_same_rule(alternating):
    model = alternating
    seqs = [np.array([0, 1, 0, 2]), np.array([0, 0]), np.array([1]), np.array([0, 2, 0])]
    events = model.impossible_events(seqs)
    np.testing.assert_array_equal(events, [[-1, -1], [1, 0], [0, 1], [-1, -1]])
    scores = model.score_samples(seqs)
    assert np.isfinite(scores[[0, 3]]).all() and np.isneginf(scores[[1, 2]]).all()
    np.testing.assert_array_equal(model.score_samples(seqs, n_partitions=2), scores)
    # the exact log-likelihood of a deterministic chain: the emission probabilities of state 1
    np.testing.assert_allclose(scores[[0, 3]], [2 * math.log(0.5), math.log(0.5)], rtol=1e-12)
    calls = {
        "posterior": lambda s: model.posterior(s),
        "posterior, 2 partitions": lambda s: model.posterior(s, n_partitions=2),
        "predict": model.predict_next_proba,
        "decode": model.decode,
        "IS": lambda s: model.log_marginal_is(s, n_samples=2),
    }
    for name, call in calls.items():
        with pytest.raises(
            ImpossibleSequenceError, match=r"^sequence 1 holds symbol 0 \(event 2\), which no"
        ) as err:
            call(seqs)
        assert (err.value.sequence, err.value.event, err.value.symbol) == (1, 1, 0), name
        good = [seqs[0], seqs[3]]
        out = call(good)
        values = out["state_marginals"] if isinstance(out, dict) else out
        assert all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in values), name
    np.testing.assert_array_equal(model.decode([seqs[0]])[0], [0, 1, 0, 1])


def test_the_error_survives_pickling():
    import pickle

    err = ImpossibleSequenceError("s-7", 2, 5, "which no state path can emit there")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and (back.sequence, back.event, back.symbol) == ("s-7", 2, 5)


def test_a_model_that_forbids_nothing_has_no_support_restriction():
    model = VariantHMM(2, n_symbols=3, seed=0, max_iter=1).fit([np.array([0, 1, 2])])
    assert supports(model.params_) is None
    np.testing.assert_array_equal(model.impossible_events([np.array([2, 2])]), [[-1, -1]])


def _run(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The two models of the report: a fitted point-B model that never saw 'd' and an all-point
    model with -inf entries, and a log each with one impossible sequence."""
    d = tmp_path_factory.mktemp("impossible")
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 3, int(rng.integers(5, 20))) for _ in range(60)]
    point_B = VariantHMM(2, n_symbols=4, sharing=ParameterSharing(B="point"), seed=0, max_iter=5).fit(seqs)
    point_B.save(d / "point-B.json", vocabulary=list("abcd"))
    (d / "adb.txt").write_text("a b c\na d b\n")
    doc = {
        "format": "ldhmm", "version": 2, "class": "VariantHMM",
        "config": {**json.loads((d / "point-B.json").read_text())["config"], "n_symbols": 3},
        "sharing": {"pi": "point", "A": "point", "B": "point", "learn_prior": True, "pseudocount": 0.0},
        "prior": {}, "posterior": {},
        "log_point": {"pi": ALTERNATING[0], "A": ALTERNATING[1], "B": [[0.0, NEG, NEG], [NEG, 0.0, NEG]]},
        "elbo_history": [], "vocabulary": list("abc"),
    }  # fmt: skip
    (d / "all-point.json").write_text(json.dumps(doc, allow_nan=True))
    (d / "ab.txt").write_text("a b a b\nb a\n")
    return d


@pytest.mark.parametrize("command", ["score", "posterior", "predict", "decode"])
@pytest.mark.parametrize(
    "model, data, named",
    [
        ("point-B.json", "adb.txt", "adb.txt:2: the model gives this sequence probability 0: symbol 'd' "
         "(event 2), to which the model's point-estimated B gives probability 0 in every state"),
        ("all-point.json", "ab.txt", "ab.txt:2: the model gives this sequence probability 0: symbol 'b' "
         "(event 1), which no state path"),
    ],
)  # fmt: skip
def test_every_command_refuses_an_impossible_sequence_in_one_line(files, command, model, data, named):
    out = files / f"{command}.csv"
    code, err = _run([command, str(files / model), str(files / data), "--out", str(out)])
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert named in err, err
    assert not out.exists()
    # the possible line alone is scored, finitely
    (files / "first.txt").write_text((files / data).read_text().splitlines()[0] + "\n")
    code, err = _run([command, str(files / model), str(files / "first.txt"), "--out", str(out), "--quiet"])
    assert code == 0, err
    assert "nan" not in out.read_text().lower() and "inf" not in out.read_text().lower()
    out.unlink()
