"""Row-wise local parameters of the SVI route: each visit of a row is one Adam step of its own,
rows outside the batch do not move, and the route's fit is unchanged by serving rows."""

import numpy as np
import pyro
import torch
from torch.distributions import constraints

from ldhmm.inference.svi.local_rows import LocalRows

N_ROWS, EVENT = 6, (2, 3)
TARGET = torch.linspace(0.5, 3.0, N_ROWS * 6, dtype=torch.float64).reshape((N_ROWS,) + EVENT)


def _guide(index):
    """A guide-like function: one local parameter in a subsampled plate; the loss of its rows."""
    with pyro.plate("sequences", N_ROWS, subsample=index, dim=-1):
        q = pyro.param(
            "q",
            lambda: torch.ones((N_ROWS,) + EVENT, dtype=torch.float64),
            constraint=constraints.positive,
            event_dim=2,
        )
    return ((q - TARGET[index]) ** 2 * (1 + index[:, None, None])).sum()


def _row_wise(batches, lr=0.1):
    """Values of q after serving ``batches`` in turn through LocalRows."""
    with pyro.get_param_store().scope():
        _guide(torch.arange(N_ROWS))
        rows = LocalRows(["q"], lr)
        for index in batches:
            with rows.batch(index):
                loss = _guide(index)
            loss.backward()
            rows.step()
        return pyro.param("q").detach().clone()


def _own_adam(batches, lr=0.1):
    """The same with one torch Adam per row, stepped only when its row is in the batch."""
    u = [torch.zeros(EVENT, dtype=torch.float64, requires_grad=True) for _ in range(N_ROWS)]
    optims = [torch.optim.Adam([p], lr=lr) for p in u]
    for index in batches:
        q = torch.stack([u[i].exp() for i in index.tolist()])
        loss = ((q - TARGET[index]) ** 2 * (1 + index[:, None, None])).sum()
        loss.backward()
        for i in index.tolist():
            optims[i].step()
            optims[i].zero_grad()
    return torch.stack([p.detach().exp() for p in u])


def test_each_visit_is_one_adam_step_of_the_row():
    rng = np.random.default_rng(0)
    batches = [torch.from_numpy(np.sort(rng.choice(N_ROWS, size=3, replace=False))) for _ in range(25)]
    got = _row_wise(batches)
    want = _own_adam(batches)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # never visited rows keep their start; visited ones moved
    visited = torch.zeros(N_ROWS, dtype=torch.bool)
    for index in batches:
        visited[index] = True
    assert visited.all() and not torch.allclose(got, torch.ones_like(got))


def test_rows_outside_the_batch_do_not_move():
    first, second = torch.tensor([0, 2, 4]), torch.tensor([1, 3])
    after_first = _row_wise([first])
    after_both = _row_wise([first, second])
    torch.testing.assert_close(after_both[first], after_first[first], rtol=0, atol=0)
    torch.testing.assert_close(after_first[second], torch.ones((2,) + EVENT, dtype=torch.float64))
    assert not torch.allclose(after_both[second], after_first[second])


def test_whole_batches_equal_torch_adam_on_the_full_tensor():
    everything = torch.arange(N_ROWS)
    got = _row_wise([everything] * 10)
    u = torch.zeros((N_ROWS,) + EVENT, dtype=torch.float64, requires_grad=True)
    optim = torch.optim.Adam([u], lr=0.1)
    for _ in range(10):
        loss = ((u.exp() - TARGET) ** 2 * (1 + everything[:, None, None])).sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
    torch.testing.assert_close(got, u.detach().exp(), rtol=1e-12, atol=1e-12)


def test_set_rows_writes_values_and_restarts_their_moments():
    with pyro.get_param_store().scope():
        _guide(torch.arange(N_ROWS))
        rows = LocalRows(["q"], 0.1)
        index = torch.tensor([1, 4])
        with rows.batch(index):
            loss = _guide(index)
        loss.backward()
        rows.step()
        new = torch.full((2,) + EVENT, 2.4567, dtype=torch.float64)  # no target equals it
        rows.set_rows(index, {"q": new})
        q = pyro.param("q").detach()
        torch.testing.assert_close(q[index], new, rtol=1e-15, atol=0)
        torch.testing.assert_close(
            q[torch.tensor([0, 2, 3, 5])], torch.ones((4,) + EVENT, dtype=torch.float64)
        )
        # the next visit is a first Adam step again: |step| = lr on every entry
        with rows.batch(index):
            loss = _guide(index)
        loss.backward()
        rows.step()
        moved = pyro.param("q").detach()[index].log() - new.log()
        torch.testing.assert_close(moved.abs(), torch.full_like(moved, 0.1), rtol=1e-6, atol=0)
