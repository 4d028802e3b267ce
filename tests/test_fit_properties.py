"""The properties every fit must keep, whatever its restart and refresh policy, checked on random
configurations drawn from the model itself (K 2..5, V 3..20, Dirichlet concentrations 0.2..20,
lengths 5..100), not on one example:

1. re-scoring a default fit's training set (the held-out E-step) gives its training ELBO within
   :data:`RESCORE_LIMIT` nats/token;
2. a default fit's held-out bound is at most :data:`TRUTH_LIMIT` nats/token below the true
   hyper-parameters' (same guide, same held-out E-step);
3. FF's bound never exceeds PF's for the same hyper-parameters, per sequence (FF's family of
   q(Z) lies inside PF's), tested under true priors whose concentrations are all at least 1;
4. a fit's numbers do not depend on how its partitions are run: the in-process fit is the fit
   over one partition, bitwise; another cut of the database changes only the order of
   additions, so the ELBO moves by rounding only, and held-out scores not at all beyond it.

The held-out E-step reaches these thanks to its extra starts (``"factorized"`` for PF, and
``"constant"`` and ``"smoothed"`` for every guide: ``ldhmm.inference.cavi.expectation``):
without them PF stops below FF's bound under sparse priors and under learned priors at their
caps (property 3), and re-scoring misses the training ELBO of fits whose learned priors sit at
their caps and of FF fits on sparse transition priors with peaked emissions (property 1).

Every configuration is a seed of :func:`draw_config`; each failure message names its
configuration and its margin.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest

from ldhmm.models import LDHMM

#: Largest |re-scored training bound - training ELBO| allowed, nats per token.
RESCORE_LIMIT = 0.005
#: How far a default fit's held-out bound may fall below the truth's, nats per token.
TRUTH_LIMIT = 0.02
#: Relative slack of "FF <= PF" per sequence (two E-steps that stop at a relative change of
#: 1e-6 of the same optimum agree far closer than this).
FF_PF_RTOL = 1e-8
#: Concentrations of the random configurations.
LOW, HIGH = 0.2, 20.0


@dataclass(frozen=True, eq=False)
class Config:
    """A configuration: true hyper-parameters and the data drawn from them (hashed by identity:
    :func:`draw_config` returns one object per arguments)."""

    seed: int
    n_states: int
    n_symbols: int
    level: float
    hyperparameters: tuple
    train: list
    held: list

    def truth(self, guide: str) -> LDHMM:
        return LDHMM.from_hyperparameters(*self.hyperparameters, guide=guide)

    def __str__(self) -> str:
        lengths = [len(s) for s in self.train + self.held]
        return (
            f"seed {self.seed}: K {self.n_states}, V {self.n_symbols}, level {self.level:.2f}, "
            f"{len(self.train)} + {len(self.held)} sequences of {min(lengths)}..{max(lengths)}"
        )


def _log_uniform(rng, low, high, size=None):
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def random_hyperparameters(rng, K: int, V: int, level: float, low: float = LOW, high: float = HIGH):
    """Hyper-parameters around a concentration ``level``: every entry ``level`` times a factor
    in 1/3..3, sticky transitions and two favoured symbols per state (factor 4 more), clipped
    to ``low..high``."""

    def entries(boost):
        return np.clip(level * _log_uniform(rng, 1 / 3, 3, boost.shape) * boost, low, high)

    sticky = np.ones((K, K)) + 3 * np.eye(K)
    peaked = np.ones((K, V))
    for k in range(K):
        peaked[k, rng.choice(V, 2, replace=False)] = 4.0
    return entries(np.ones(K)), entries(sticky), entries(peaked)


def sparse_hyperparameters(rng, K: int, V: int, low: float = 0.2, high: float = 0.45):
    """Every concentration uniform in ``low..high``: sparse priors (per-sequence parameters
    near the simplex's corners)."""
    return rng.uniform(low, high, K), rng.uniform(low, high, (K, K)), rng.uniform(low, high, (K, V))


def peaked_sticky_sparse_hyperparameters(rng, K: int, V: int, transitions: float = 0.3, scale: float = 10.0):
    """Sparse transition priors (every entry ``transitions``), emissions peaked on two symbols
    per state with concentration ``scale``, initial state 1."""
    beta = np.full((K, V), 0.2)
    for k in range(K):
        beta[k, rng.choice(V, 2, replace=False)] += 3.0
    return np.ones(K), np.full((K, K), transitions), beta / beta.sum(1, keepdims=True) * scale


@functools.cache
def draw_config(
    seed: int,
    kind: str = "random",
    n_states: int | None = None,
    level: float | None = None,
    n_train: int | None = None,
    n_held: int = 40,
    low: float = LOW,
) -> Config:
    """The configuration of ``seed``: K 2..5 and V 3..20 (unless given), hyper-parameters of
    ``kind`` (``"random"``: :func:`random_hyperparameters` at a log-uniform ``level`` in
    ``low..HIGH``; ``"sparse"``: :func:`sparse_hyperparameters`; ``"sticky"``:
    :func:`peaked_sticky_sparse_hyperparameters`), 40..120 training sequences (unless given) and
    ``n_held`` held-out ones, their lengths uniform in a random range inside 5..100."""
    rng = np.random.default_rng([seed, 2024])
    K = int(rng.integers(2, 6)) if n_states is None else n_states
    V = int(rng.integers(3, 21))
    if kind == "random":
        level = float(_log_uniform(rng, low, HIGH)) if level is None else level
        hypers = random_hyperparameters(rng, K, V, level, low=low)
    elif kind == "sparse":
        hypers = sparse_hyperparameters(rng, K, V)
    elif kind == "sticky":
        hypers = peaked_sticky_sparse_hyperparameters(rng, K, V)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    level = float(np.median(np.concatenate([h.ravel() for h in hypers])))
    M = int(rng.integers(40, 121)) if n_train is None else n_train
    lo = int(rng.integers(5, 60))
    hi = int(rng.integers(lo + 5, 101))
    truth = LDHMM.from_hyperparameters(*hypers)
    train = truth.sample(M, lengths=rng.integers(lo, hi + 1, M), seed=seed + 1)
    held = truth.sample(n_held, lengths=rng.integers(lo, hi + 1, n_held), seed=seed + 2)
    return Config(seed, K, V, level, hypers, train, held)


@functools.cache
def default_fit(config: Config, guide: str) -> LDHMM:
    """The default fit of ``guide`` (every fitting setting at its default)."""
    return LDHMM(config.n_states, n_symbols=config.n_symbols, guide=guide, seed=config.seed).fit(config.train)


def per_token(total: float, sequences) -> float:
    return total / sum(map(len, sequences))


def rescoring_gap(model: LDHMM, train) -> float:
    """Re-scored training bound minus training ELBO, nats per token."""
    return per_token(model.score_samples(train).sum() - model.elbo_history_[-1], train)


def held_out_margin(model: LDHMM, config: Config, guide: str) -> float:
    """The fit's held-out bound minus the truth's (same guide), nats per token."""
    fitted = model.score_samples(config.held).sum()
    truth = config.truth(guide).score_samples(config.held).sum()
    return per_token(fitted - truth, config.held)


def ff_minus_pf(hyperparameters, sequences) -> np.ndarray:
    """Per sequence: FF's held-out bound minus PF's, minus the relative slack (> 0: FF above
    PF beyond rounding)."""
    pf = LDHMM.from_hyperparameters(*hyperparameters, guide="pf").score_samples(sequences)
    ff = LDHMM.from_hyperparameters(*hyperparameters, guide="ff").score_samples(sequences)
    return ff - pf - FF_PF_RTOL * np.abs(pf)


# ---- 1 and 2: default fits on random configurations ------------------------------------------

#: Seeds of the fitted configurations (K cycles through 2..5, so each K twice) ...
FIT_SEEDS = tuple(range(1000, 1008))
#: ... and fits whose learned priors sit at their caps (1e-6 / 1e6), where the held-out
#: E-step's own starts do not reach the per-sequence optima that the training fit reached by
#: warm starts: its "constant" and "smoothed" starts do (before them: 1000-ff -0.0180,
#: 1009-ff -0.0061, 1017-pf -0.0081 nats/token). 1009 and 1017 are not among FIT_SEEDS:
#: fitted for this test alone.
AT_CAPS_SEEDS = ((1009, "ff"), (1017, "pf"))


def fit_config(seed: int) -> Config:
    return draw_config(seed, n_states=2 + (seed - 1000) % 4)


def _fit_cases(extra: tuple = ()):
    """(seed, guide) of :data:`FIT_SEEDS`, then ``extra``."""
    cases = [(seed, guide) for seed in FIT_SEEDS for guide in ("pf", "ff")]
    return [pytest.param(seed, guide, id=f"{seed}-{guide}") for seed, guide in cases + list(extra)]


@pytest.mark.parametrize("seed,guide", _fit_cases(AT_CAPS_SEEDS))
def test_rescoring_the_training_set_gives_the_training_elbo(seed, guide):
    config = fit_config(seed)
    gap = rescoring_gap(default_fit(config, guide), config.train)
    assert abs(gap) <= RESCORE_LIMIT, f"{config}: re-scored - training ELBO = {gap:+.5f} nats/token"


@pytest.mark.parametrize("seed,guide", _fit_cases())
def test_default_fit_is_as_good_as_the_truth_on_held_out_data(seed, guide):
    config = fit_config(seed)
    margin = held_out_margin(default_fit(config, guide), config, guide)
    assert margin >= -TRUTH_LIMIT, f"{config}: held-out bound - truth's = {margin:+.5f} nats/token"


# ---- 3: FF <= PF for the same hyper-parameters ----------------------------------------------

#: Configurations scored under their true priors, every concentration in 1..20.
DENSE_SEEDS = tuple(range(1000, 1012))


@pytest.mark.parametrize("seed", DENSE_SEEDS)
def test_ff_bound_never_exceeds_pf_bound_per_sequence(seed):
    config = draw_config(seed, low=1.0, n_train=1)
    excess = ff_minus_pf(config.hyperparameters, config.held)
    assert (excess <= 0).all(), f"{config}: FF above PF on sequences {np.flatnonzero(excess > 0)}"


#: Sparse true priors (every concentration 0.2..0.45), as in :func:`sparse_hyperparameters`.
SPARSE_SEEDS = tuple(range(1000, 1006))


def test_pf_reaches_ff_per_sequence_under_sparse_true_priors():
    failures = []
    for seed in SPARSE_SEEDS:
        config = draw_config(seed, kind="sparse", n_train=1)
        excess = ff_minus_pf(config.hyperparameters, config.held)
        if (excess > 0).any():
            failures.append(f"{config}: {int((excess > 0).sum())} sequences, up to {excess.max():.3f} nats")
    assert not failures, "FF above PF: " + "; ".join(failures)


#: The priors that the default FF fit of configuration 1000 learned (K 2, V 4; at their caps):
#: PF's held-out E-step stops below FF's bound on two of its held-out sequences, by 9.0 and 8.0
#: nats (fixed here so that the test does not depend on the fit).
LEARNED_AT_CAPS = (
    [2.2884583256657052e-04, 1.0e06],
    [[4.7096190385214680e02, 9.9999999999999995e-07], [3.2216647940681645e-06, 1.4957729352222529e-05]],
    [
        [9.8190369064789484e04, 2.8020255927778297e05, 7.2804801935409824e05, 9.7951222617406223e05],
        [5.0560144800944808e00, 1.6707259646540354e01, 1.6638124567241483e01, 1.6586490339730876e01],
    ],
)


def test_pf_reaches_ff_per_sequence_under_learned_priors_at_their_caps():
    config = fit_config(1000)
    excess = ff_minus_pf(LEARNED_AT_CAPS, config.held)
    assert (excess <= 0).all(), (
        f"FF above PF on sequences {np.flatnonzero(excess > 0)} by {excess[excess > 0]}"
    )


def test_ff_rescoring_on_sparse_transitions_and_peaked_emissions():
    config = draw_config(1005, kind="sticky", n_states=3, n_train=120)
    gap = rescoring_gap(default_fit(config, "ff"), config.train)
    assert abs(gap) <= RESCORE_LIMIT, f"{config}: re-scored - training ELBO = {gap:+.5f} nats/token"


# ---- 4: partitions ---------------------------------------------------------------------------


def _same_fit(a: LDHMM, b: LDHMM):
    for name in (
        "elbo_history_",
        "e_step_elbo_history_",
        "init_elbo_history_",
        "alpha_pi_",
        "alpha_A_",
        "beta_",
    ):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("guide", ["pf", "ff"])
def test_partitions_change_the_fit_by_rounding_only(guide):
    """A converged default fit (restarts, refreshes, FF from the PF fit): on one partition it is
    the in-process fit, bitwise; on three, the same terms added in another order."""
    config = fit_config(1001)
    here = default_fit(config, guide)
    make = lambda: LDHMM(config.n_states, n_symbols=config.n_symbols, guide=guide, seed=config.seed)
    assert here.converged_
    _same_fit(make().fit(config.train, n_partitions=1), here)
    three = make().fit(config.train, n_partitions=3)
    assert three.n_partitions_ == 3
    np.testing.assert_allclose(three.elbo_history_[-1], here.elbo_history_[-1], rtol=1e-5, atol=0)


@pytest.mark.parametrize("guide", ["pf", "ff"])
def test_held_out_scores_do_not_depend_on_partitions_or_buckets(guide):
    config = fit_config(1001)
    model = default_fit(config, guide)
    expected = model.score_samples(config.held)
    np.testing.assert_allclose(model.score_samples(config.held, n_partitions=3), expected, rtol=1e-10, atol=0)
    small = LDHMM.from_hyperparameters(
        model.alpha_pi_, model.alpha_A_, model.beta_, guide=guide, bucket_cells=200
    )
    np.testing.assert_allclose(small.score_samples(config.held), expected, rtol=1e-10, atol=0)
