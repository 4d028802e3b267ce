"""A guide's own update is never silently replaced by a compiled kernel, and ``update_hidden``
is told the EM iteration and the sweep (``ldhmm.inference.cavi.protocol.update_hidden``)."""

from __future__ import annotations

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.inference import PFGuide, resolve_guide
from ldhmm.inference.cavi.guides import check_compiled_update
from ldhmm.inference.cavi.protocol import takes_schedule


@pytest.fixture(scope="module")
def train():
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    return truth.sample(40, lengths=np.random.default_rng(0).integers(4, 15, 40), seed=1)


class OwnUpdate(PFGuide):
    """A PF guide with an update of its own (here the same numbers, recorded)."""

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask, *, iteration=None, sweep=1):
        self.calls.append((iteration, sweep))
        return super().update_hidden(state, log_initial, log_transition, log_obs, mask)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []


def test_a_declared_kernel_cannot_replace_an_own_update():
    with pytest.raises(ValueError, match="declares compiled_update='pf' but has its own update_hidden"):
        resolve_guide(OwnUpdate())  # PFGuide's compiled=True declares "pf"
    stated = OwnUpdate()
    stated.matches_kernel = True  # the guide says its update is the kernel's
    assert resolve_guide(stated) is stated
    resolve_guide(OwnUpdate(compiled=False))  # no declaration: its update runs
    check_compiled_update(PFGuide())  # the built-in update is the kernel's
    patched = PFGuide()
    patched.update_hidden = lambda *args: None
    with pytest.raises(ValueError, match="own update_hidden"):
        check_compiled_update(patched)


def test_a_declaration_made_after_construction_is_refused_at_fit(train):
    guide = OwnUpdate(compiled=False)
    model = LDHMM(2, guide=guide, seed=0, max_iter=2, n_init=1)
    guide.compiled = True  # compiled_update is now "pf"
    with pytest.raises(ValueError, match="matches_kernel = True"):
        model.fit(train)


def test_update_hidden_is_told_iteration_and_sweep_and_numbers_stay(train):
    own = OwnUpdate(compiled=False)
    # one run (no seeded start): the schedule of one EM
    a = LDHMM(2, guide=own, seed=0, max_iter=3, n_init=1, seeded_start="none").fit(train)
    b = LDHMM(2, guide=PFGuide(compiled=False), seed=0, max_iter=3, n_init=1, seeded_start="none").fit(train)
    np.testing.assert_array_equal(a.elbo_history_, b.elbo_history_)  # telling changes nothing
    iterations = [i for i, _ in own.calls]
    assert set(iterations) == {1, 2, 3} and iterations == sorted(iterations)  # EM order
    for it in (1, 2, 3):
        sweeps = [s for i, s in own.calls if i == it]
        assert sweeps[0] == 1 and max(sweeps) > 1  # each E-step counts its sweeps from 1
    n_fit = len(own.calls)
    a.score_samples(train[:4])
    assert own.calls[n_fit:] and all(i is None for i, _ in own.calls[n_fit:])  # held out: no EM


def test_which_updates_take_the_schedule():
    assert takes_schedule(OwnUpdate().update_hidden)
    assert not takes_schedule(PFGuide().update_hidden)
    assert takes_schedule(lambda s, i, t, o, m, **kw: None)
    assert not takes_schedule(lambda s, i, t, o, m, iteration=None: None)  # both or none
