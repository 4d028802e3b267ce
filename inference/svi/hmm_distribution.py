"""A padded categorical HMM as a Pyro distribution: ``pyro.sample("x", ..., obs=tokens)``.

:class:`MaskedCategoricalHMM` is the likelihood ``p(x_m | pi_m, A_m, B_m)`` of a padded batch
of symbol sequences with the hidden states summed out exactly by the forward algorithm
(:func:`ldhmm.inference.ops.forward.chain_log_likelihood`), in the manner of Pyro's
``DiscreteHMM``, plus a mask for variable lengths. A model of the SVI route
(:mod:`ldhmm.inference.svi.svi_fit`) observes its batch through it, inside ``pyro.plate("sequences")``::

    pyro.sample("x", MaskedCategoricalHMM.from_probs(pi, A, B, batch.mask), obs=batch.tokens)

Its batch shape is the broadcast of the parameters' and the mask's leading dimensions (one
entry per sequence, times Monte Carlo particles and enumerated variables); its event is the T
positions. ``log_prob`` returns one number per sequence; ``sample`` draws symbols position by
position (padding positions get symbols too: the mask says which are real).
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ..ops.forward import chain_log_likelihood, gather_emissions

__all__ = ["ChainDistribution", "MaskedCategoricalHMM", "chain_constraints", "clamped_logs"]


def clamped_logs(*probs: torch.Tensor) -> tuple:
    """The logs of probability tensors (Dirichlet draws), each entry clamped at the smallest
    normal float first, so that an underflowed draw gives a finite log."""
    return tuple(p.clamp_min(torch.finfo(p.dtype).tiny).log() for p in probs)


def chain_constraints(emission_dims: int) -> dict:
    """The ``arg_constraints`` of a :class:`ChainDistribution`: ``log pi`` (..., K) and ``log A``
    (..., K, K) real, ``log B`` real in its last ``emission_dims`` dimensions (2: (K, V); 3:
    (K, C, V), a row per state and context)."""
    return {
        "initial_logits": constraints.real_vector,
        "transition_logits": constraints.independent(constraints.real, 2),
        "emission_logits": constraints.independent(constraints.real, emission_dims),
    }


class ChainDistribution(dist.TorchDistribution):
    """What the observed chains share (this module's :class:`MaskedCategoricalHMM`, the contextual
    models' :class:`~ldhmm.models.pyro_contextual.ContextualCategoricalHMM`): the parameters'
    logs normalized, symbols ``0..V-1`` at each of the T positions, and ``expand`` by reference.

    A subclass checks its arguments, sets its own tensors and calls this ``__init__``; it names
    in ``tensors`` the attributes that define it (``expand`` hands them to the new instance as
    they are: ``log_prob`` broadcasts them) and sets ``arg_constraints`` by :func:`chain_constraints`
    (the event dimensions of its ``log B``).
    """

    tensors = ("initial_logits", "transition_logits", "emission_logits", "mask")
    has_enumerate_support = False

    def __init__(
        self, initial_logits, transition_logits, emission_logits, mask, validate_args=None, positions=()
    ):
        """``log pi`` (..., K), ``log A`` (..., K, K) and ``log B`` (..., K, [C,] V), each stored
        normalized over its last dimension, and ``mask`` (..., T); the batch shape is the
        broadcast of their leading dimensions and those of ``positions`` (more tensors (..., T)
        the subclass holds), the event the T positions."""
        self.initial_logits = initial_logits - initial_logits.logsumexp(-1, keepdim=True)
        self.transition_logits = transition_logits - transition_logits.logsumexp(-1, keepdim=True)
        self.emission_logits = emission_logits - emission_logits.logsumexp(-1, keepdim=True)
        self.mask = mask
        emission_dims = self.arg_constraints["emission_logits"].event_dim
        batch_shape = torch.broadcast_shapes(
            initial_logits.shape[:-1],
            transition_logits.shape[:-2],
            emission_logits.shape[:-emission_dims],
            *(t.shape[:-1] for t in positions),
            mask.shape[:-1],
        )
        super().__init__(batch_shape, mask.shape[-1:], validate_args=validate_args)

    @property
    def n_symbols(self) -> int:
        return int(self.emission_logits.shape[-1])

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.independent(constraints.integer_interval(0, self.n_symbols - 1), 1)

    def _expanded(self, cls: type, batch_shape, _instance=None):
        """``expand`` of the subclass ``cls``: a new instance of batch shape ``batch_shape``
        holding this one's :attr:`tensors`."""
        new = self._get_checked_instance(cls, _instance)
        for name in self.tensors:
            setattr(new, name, getattr(self, name))
        super(ChainDistribution, new).__init__(torch.Size(batch_shape), self.event_shape, validate_args=False)
        new._validate_args = self.__dict__.get("_validate_args")
        return new


class MaskedCategoricalHMM(ChainDistribution):
    """Categorical emissions from a discrete Markov chain, lengths given by a mask.

    Parameters
    ----------
    initial_logits : Tensor, shape (..., K)
        ``log pi`` (normalized here).
    transition_logits : Tensor, shape (..., K, K)
        ``log A``, row j the distribution of the next state after j (rows normalized here).
    emission_logits : Tensor, shape (..., K, V)
        ``log B`` (rows normalized here).
    mask : BoolTensor, shape (..., T)
        True on the real positions of each sequence; a prefix of each row, at least one.
    """

    arg_constraints = chain_constraints(2)

    def __init__(self, initial_logits, transition_logits, emission_logits, mask, validate_args=None):
        K = initial_logits.shape[-1]
        if transition_logits.shape[-2:] != (K, K) or emission_logits.shape[-2] != K:
            raise ValueError(
                f"MaskedCategoricalHMM: initial_logits {tuple(initial_logits.shape)}, transition_logits "
                f"{tuple(transition_logits.shape)} and emission_logits {tuple(emission_logits.shape)} "
                "do not share one number of states K in (..., K), (..., K, K), (..., K, V)"
            )
        if mask.dtype != torch.bool or mask.dim() < 1:
            raise ValueError(f"MaskedCategoricalHMM: mask must be a bool tensor (..., T), got {mask.dtype}")
        super().__init__(initial_logits, transition_logits, emission_logits, mask, validate_args)

    @classmethod
    def from_probs(cls, initial, transition, emission, mask, validate_args=None):
        """The same from probabilities (e.g. Dirichlet draws ``pi``, ``A``, ``B``); entries are
        clamped at the smallest normal float before the log, so an underflowed draw is finite."""
        return cls(*clamped_logs(initial, transition, emission), mask, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expanded(MaskedCategoricalHMM, batch_shape, _instance)

    def log_prob(self, value):
        """``log p(x)`` per sequence, shape ``broadcast(batch_shape, value.shape[:-1])``."""
        if self._validate_args:
            self._validate_sample(value)
        log_obs = gather_emissions(self.emission_logits, value)
        out = chain_log_likelihood(self.initial_logits, self.transition_logits, log_obs, self.mask)
        return out.expand(torch.broadcast_shapes(out.shape, self.batch_shape))

    def sample(self, sample_shape=()):
        """Symbols drawn forward through the chain, shape ``sample_shape + batch_shape + (T,)``."""
        shape = torch.Size(sample_shape) + self.batch_shape
        K = self.initial_logits.shape[-1]
        T = self.event_shape[0]
        with torch.no_grad():
            init = self.initial_logits.expand(shape + (K,))
            trans = self.transition_logits.expand(shape + (K, K))
            emit = self.emission_logits.expand(shape + (K, self.n_symbols))
            z = dist.Categorical(logits=init).sample()
            xs = []
            for n in range(T):
                if n > 0:
                    rows = torch.gather(trans, -2, z[..., None, None].expand(shape + (1, K)))[..., 0, :]
                    z = dist.Categorical(logits=rows).sample()
                row = torch.gather(emit, -2, z[..., None, None].expand(shape + (1, self.n_symbols)))
                xs.append(dist.Categorical(logits=row[..., 0, :]).sample())
        return torch.stack(xs, dim=-1)
