"""Variational families for LDHMM: the FF and PF guides.

A guide is two things at once.

1. A **Pyro guide**: called with the model's arguments, it samples the sites ``pi``, ``A``, ``B``
   (per-sequence Dirichlets with parameters ``g_pi``, ``g_A``, ``g_B``) and ``z_0 .. z_(T-1)`` from
   its ``q(Z)``, so Pyro's ``Trace_ELBO`` and ``SVI`` work on it (:mod:`ldhmm.inference.svi.svi_fit`).
2. A **closed-form q(Z) update** for coordinate ascent (:mod:`ldhmm.inference.cavi.expectation`): given the
   expected log-parameters, replace q(Z) by its optimum within the family and report its state
   marginals, summed pairwise marginals and entropy.

The closed-form half follows :class:`ldhmm.inference.cavi.protocol.GuideProtocol` (a user-written
guide needs no base class; subclass :class:`ChainGuide` for the Pyro half for free). The Pyro half
adds:

``pyro_hidden_params(state, log_initial, log_transition, log_obs, mask) -> dict``
    the values of the guide's Pyro parameters for q(Z) (besides ``g_pi``, ``g_A``, ``g_B``) that
    reproduce a closed-form fit, so that Pyro's ELBO can be compared with the closed form.
``init_pyro_hidden_params(M, T, K, dtype) -> dict``
    their starting values and constraints.
``sample_hidden(params, mask)``
    inside the Pyro guide: sample the sites ``z_t``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributions import constraints

from ...data.lazy_modules import LazyModule
from ..ops.forward import forward_log_messages
from ..ops.mean_field import mean_field_stats, mean_field_sweep
from .exact_chain import ExactChain, chain_update, forward_backward
from .protocol import GuideProtocol, HiddenUpdate

# Pyro only where a guide runs as a Pyro guide (``__call__``): the E-step, scoring and the
# commands that only use the closed form do not load it (docs/performance.md, start-up).
pyro = LazyModule("pyro")
dist = LazyModule("pyro.distributions")
poutine = LazyModule("pyro.poutine")

__all__ = [
    "sequence_dirichlet_params",
    "ChainGuide",
    "PFGuide",
    "FFGuide",
    "KERNEL_UPDATES",
    "check_compiled_update",
    "resolve_guide",
]


def sequence_dirichlet_params(M: int, alpha_pi, alpha_A, beta, init: dict) -> tuple:
    """The guide's Dirichlet parameters of every sequence in Pyro's param store: ``g_pi`` (M, K),
    ``g_A`` (M, K, K), ``g_B`` (M, *beta.shape) (B's rows: (K, V), or (K, C, V) with emission
    contexts), from ``init`` where it has them, else the priors."""
    positive = constraints.positive

    def param(name, prior):
        return pyro.param(
            name, lambda: init.get(name, prior.detach().expand(M, *prior.shape).clone()), constraint=positive
        )

    return param("g_pi", alpha_pi), param("g_A", alpha_A), param("g_B", beta)


class ChainGuide:
    """Base class: the Pyro guide over ``pi``, ``A``, ``B`` and the hidden chain.

    Subclasses define the q(Z) family through :meth:`update_hidden`, :meth:`pyro_hidden_params`
    and :meth:`sample_hidden`.
    """

    name = "chain"
    compiled_update = None

    # ---- closed-form protocol -------------------------------------------------------------
    def init_state(self, log_initial, log_transition, log_obs, mask) -> Any:
        return None

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask):
        raise NotImplementedError

    def select_state(self, state, index):
        return None if state is None else state[index]

    def scatter_state(self, state, index, part):
        if state is None:
            return None
        state = state.clone()
        state[index] = part
        return state

    # ---- Pyro guide -----------------------------------------------------------------------
    def pyro_hidden_params(self, state, log_initial, log_transition, log_obs, mask) -> dict:
        raise NotImplementedError

    def init_pyro_hidden_params(self, M: int, T: int, K: int, dtype) -> dict:
        raise NotImplementedError

    def sample_hidden(self, params: dict, mask: torch.Tensor) -> None:
        raise NotImplementedError

    def __call__(self, tokens, lengths, alpha_pi, alpha_A, beta, init: dict | None = None):
        """Pyro guide with the signature of :func:`ldhmm.models.pyro_model.ldhmm_model`.

        Parameters live in Pyro's param store under ``g_pi`` (M, K), ``g_A`` (M, K, K),
        ``g_B`` (M, *beta.shape) and the family's own names; ``init`` gives their starting values
        (e.g. a closed-form fit, see :func:`ldhmm.inference.svi.svi_fit.guide_init_from_state`).
        ``beta``: B's prior rows, (K, V), or (K, C, V) for emissions with contexts (the
        contextual model's guide, :class:`ldhmm.models.pyro_contextual.ContextualChainGuide`):
        every dimension after the first is one event dimension of the site ``B``.
        """
        M, T = tokens.shape
        K = beta.shape[0]
        init = init or {}
        g_pi, g_A, g_B = sequence_dirichlet_params(M, alpha_pi, alpha_A, beta, init)
        defaults = self.init_pyro_hidden_params(M, T, K, beta.dtype)
        hidden = {}
        for name, (default, constraint) in defaults.items():
            hidden[name] = pyro.param(name, lambda n=name, d=default: init.get(n, d), constraint=constraint)
        mask = torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]
        with pyro.plate("sequences", M, dim=-1):
            pyro.sample("pi", dist.Dirichlet(g_pi))
            pyro.sample("A", dist.Dirichlet(g_A).to_event(1))
            pyro.sample("B", dist.Dirichlet(g_B).to_event(beta.dim() - 1))
            self.sample_hidden(hidden, mask)


class PFGuide(ChainGuide):
    """Partially factorized family: ``q(pi) q(A) q(B) q(Z)`` with q(Z) a Markov chain.

    The optimal q(Z) is the chain with potentials ``exp(E log pi)``, ``exp(E log A)``,
    ``exp(E log B)``, found by forward-backward; then ``E_q[log p(X,Z|theta)] + H[q(Z)] = log Z*``.

    In Pyro, q(Z) is a general chain with free log-potentials ``chain_initial`` (M, K) and
    ``chain_transition`` (M, T, K, K) (entry ``[m, n, j, k]`` scores ``z_(n-1)=j, z_n=k``, plus the
    emission of position n; entry n = 0 is unused), sampled exactly by forward filtering,
    backward sampling (:func:`ldhmm.inference.ops.forward.forward_log_messages`).

    Parameters
    ----------
    reference : bool
        Use the torch recursion (:func:`ldhmm.inference.ops.forward.chain_posterior`) instead
        of the compiled chain core (slower; for testing); implies ``compiled=False``.
    compiled : bool
        Declare the compiled PF update (``compiled_update = "pf"``), so that the E-step driver
        runs a bucket whole in compiled code where it can (CPU, float64). The result is the
        same as the torch route's.
    """

    name = "pf"

    def __init__(self, reference: bool = False, compiled: bool = True):
        self.reference = reference
        self.compiled = compiled

    @property
    def compiled_update(self):
        return None if self.reference or not self.compiled else "pf"

    #: Its "chain" start would be its own best start again (see ExactChain.starts).
    starts = ExactChain.starts
    #: The held-out E-step also starts from FF's own held-out solution, so that PF's held-out
    #: bound is never below FF's on any sequence (FF's family lies inside PF's).
    held_out_starts = ("factorized",)

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask):
        return chain_update(log_initial, log_transition, log_obs, mask, reference=self.reference), state

    def pyro_hidden_params(self, state, log_initial, log_transition, log_obs, mask):
        M, T, K = log_obs.shape
        chain_initial = (log_initial.expand(M, K) + log_obs[:, 0]).clone()
        chain_transition = log_transition.expand(M, K, K)[:, None] + log_obs[:, :, None, :]
        return {"chain_initial": chain_initial, "chain_transition": chain_transition.clone()}

    def init_pyro_hidden_params(self, M, T, K, dtype):
        return {
            "chain_initial": (torch.zeros(M, K, dtype=dtype), constraints.real),
            "chain_transition": (torch.zeros(M, T, K, K, dtype=dtype), constraints.real),
        }

    def sample_hidden(self, params, mask):
        initial, transition = params["chain_initial"], params["chain_transition"]
        M, T, K = initial.shape[0], transition.shape[1], initial.shape[1]
        # Forward filtering, backward sampling: z_(L-1) from the last forward message, then each
        # z_n given z_(n+1) from alpha_n(j) + W_(n+1)[j, z_(n+1)]; the sites' log-probabilities
        # sum to log q(z) exactly, differentiable in the parameters (the scan of ops/forward.py).
        log_alpha = forward_log_messages(initial, transition, mask)
        z = None
        for n in pyro.markov(range(T - 1, -1, -1)):
            logits = log_alpha[:, n]
            if n < T - 1:
                # Where position n + 1 is real, the column of z_(n+1) in W_(n+1); at a sequence's
                # last position, alpha alone.
                columns = transition[:, n + 1].gather(2, z[:, None, None].expand(M, K, 1))[..., 0]
                logits = logits + torch.where(mask[:, n + 1, None], columns, torch.zeros_like(columns))
            with poutine.mask(mask=mask[:, n]):
                z = pyro.sample(f"z_{n}", dist.Categorical(logits=logits))


class FFGuide(ChainGuide):
    """Fully factorized family: ``q(pi) q(A) q(B) prod_n Cat(phi_n)``.

    The state carried between sweeps is ``phi`` (M, T, K). Each :meth:`update_hidden` is one exact
    coordinate-ascent pass (even positions, then odd), followed by ``extra_sweeps`` more.

    Parameters
    ----------
    extra_sweeps : int
        Additional passes over q(Z) before the Dirichlets are updated again.
    compiled : bool
        Declare the compiled FF update (``compiled_update = "ff"``; not with ``extra_sweeps``).
    """

    name = "ff"

    def __init__(self, extra_sweeps: int = 0, compiled: bool = True):
        if extra_sweeps < 0:
            raise ValueError(f"extra_sweeps must be >= 0, got {extra_sweeps}")
        self.extra_sweeps = extra_sweeps
        self.compiled = compiled

    @property
    def compiled_update(self):
        # The kernel makes one pass per sweep: extra passes run the torch route.
        return "ff" if self.compiled and not self.extra_sweeps else None

    #: Power that sharpens the exact chain's marginals into the starting factors.
    init_sharpening = 10.0

    def init_state(self, log_initial, log_transition, log_obs, mask):
        # The exact chain's marginals under the same potentials, sharpened towards their modes
        # (r^10, renormalized). The emission potentials alone (the old start) leave q(z_n) blind
        # to the transitions, and mean field, being mode-seeking, locks into poor per-sequence
        # optima from an average of modes; starting near one mode avoids both (measured in
        # docs/math.md, "Held-out E-step").
        marginals = forward_backward(log_initial, log_transition, log_obs, mask).state_marginals
        sharp = marginals**self.init_sharpening
        # in place on the one new (M, T, K) tensor: this start runs on every cold FF E-step
        sharp.div_(sharp.sum(-1, keepdim=True).clamp_min_(torch.finfo(sharp.dtype).tiny))
        return sharp.masked_fill_(~mask[..., None], 0.0).contiguous()

    def update_hidden(self, state, log_initial, log_transition, log_obs, mask):
        phi = state if state is not None else self.init_state(log_initial, log_transition, log_obs, mask)
        for _ in range(1 + self.extra_sweeps):
            phi = mean_field_sweep(phi, log_initial, log_transition, log_obs, mask)
        stats = mean_field_stats(phi, log_initial, log_transition, log_obs, mask)
        return HiddenUpdate(phi, stats.transition_counts, stats.entropy), phi

    def pyro_hidden_params(self, state, log_initial, log_transition, log_obs, mask):
        phi = state if state is not None else self.init_state(log_initial, log_transition, log_obs, mask)
        # Padded positions hold zeros; Pyro's simplex needs a distribution there (masked out).
        M, T, K = phi.shape
        filler = torch.full_like(phi, 1.0 / K)
        return {"phi": torch.where(mask[..., None], phi, filler).clamp_min(1e-300)}

    def init_pyro_hidden_params(self, M, T, K, dtype):
        return {"phi": (torch.full((M, T, K), 1.0 / K, dtype=dtype), constraints.simplex)}

    def sample_hidden(self, params, mask):
        phi = params["phi"]
        for n in pyro.markov(range(phi.shape[1])):
            with poutine.mask(mask=mask[:, n]):
                pyro.sample(f"z_{n}", dist.Categorical(probs=phi[:, n]))


#: The ``update_hidden`` methods that compute exactly what each compiled update computes: a
#: guide that declares ``compiled_update`` with one of these runs the kernel as is; one with
#: its own ``update_hidden`` must say that it matches the kernel (``matches_kernel = True``).
KERNEL_UPDATES = {
    "pf": (PFGuide.update_hidden, ExactChain.update_hidden),
    "ff": (FFGuide.update_hidden,),
}


def check_compiled_update(guide) -> None:
    """Refuse a guide whose ``compiled_update`` would silently replace its own ``update_hidden``.

    Where a guide declares a compiled update, the E-step driver runs the kernel and never
    calls the guide's ``update_hidden`` (except where the kernel does not apply). That is
    right only if the two compute the same thing: the built-in updates of
    :data:`KERNEL_UPDATES`, or a guide that says so with ``matches_kernel = True``.

    Raises
    ------
    ValueError
        A guide with its own ``update_hidden``, a ``compiled_update`` and no ``matches_kernel``.
    """
    family = getattr(guide, "compiled_update", None)
    if family not in KERNEL_UPDATES or getattr(guide, "matches_kernel", False) is True:
        return  # no compiled update (an unknown one is refused by the driver), or declared equal
    own = getattr(type(guide), "update_hidden", None)
    if own in KERNEL_UPDATES[family] and "update_hidden" not in getattr(guide, "__dict__", {}):
        return
    raise ValueError(
        f"guide {getattr(guide, 'name', type(guide).__name__)!r} ({type(guide).__name__}) declares "
        f"compiled_update={family!r} but has its own update_hidden, which the compiled {family} kernel "
        f"would replace without calling it: set compiled_update = None to run your update, or "
        f"matches_kernel = True if it computes exactly what the kernel computes"
    )


def resolve_guide(guide) -> GuideProtocol:
    """Turn ``"pf"`` / ``"ff"`` into guide objects; pass guide objects through.

    Raises
    ------
    ValueError
        For an unknown name, an object that lacks ``update_hidden``, or a guide whose declared
        compiled update would replace its own (:func:`check_compiled_update`).
    """
    if isinstance(guide, str):
        key = guide.lower()
        if key == "pf":
            return PFGuide()
        if key == "ff":
            return FFGuide()
        raise ValueError(f"unknown guide {guide!r}: use 'pf', 'ff' or a guide object")
    if not hasattr(guide, "update_hidden") or not hasattr(guide, "init_state"):
        raise ValueError(
            f"{guide!r} is not a guide: it needs init_state and update_hidden "
            "(see ldhmm.inference.cavi.protocol)"
        )
    check_compiled_update(guide)
    return guide
