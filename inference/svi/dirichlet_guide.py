"""A mean-field Dirichlet guide for any model of the SVI route: ``q(theta_m) = prod Dir(g_m)``.

:class:`DirichletMeanField` gives every Dirichlet sample site of a model inside the plate
``"sequences"`` (``pi``, ``A``, ``B`` of LDHMM; whatever a variant declares) its own
per-sequence Dirichlet ``q``. By default (``relative=True``) its concentration is the model's
prior concentration at that site plus a positive local offset,

``g_m = prior + delta_m,    delta_m > 0``     (local parameter ``q_<site>``, shape (M,) + event)

the form of the closed-form optimum ``q(theta_m) = Dir(prior + expected counts)``. The prior is
read off a run of the model on the same batch at every call (latent sites take their prior
means there, no draws; a discrete site marked for enumeration is enumerated and the prior is
the entrywise minimum over its values, so that the family contains ``Dir(prior_c + counts)``
for every value ``c``), and it stays a function of the model's parameters: when SVI moves a
prior, every sequence's ``q`` moves with it, as the closed form's collapsed M-step moves the
priors and every ``q(theta_m)`` together. Without this, a prior that should grow to
concentrations of ``1e4`` waits, epoch after epoch, for each sequence's free ``q`` to follow
(measured on Entree: docs/writing-a-variant.md). ``relative=False`` makes ``g_m`` itself the
local parameter, started at the prior.

This is the family of the closed-form fit's ``q(theta_m)``. With the hidden chain summed out
exactly, its bound ``E_q[log p(x_m | theta_m)] - KL(q || p)`` is at least the closed form's
PF bound ``E_q[log p(x_m, Z | theta_m)] + H[q(Z)] - KL`` at the same ``q(theta_m)``, because
``log p(x | theta) >= E_q(Z)[log p(x, Z | theta)] + H[q(Z)]`` for every ``theta`` and every
``q(Z)``.

Where the local rows start matters: SVI moves a local row only when its minibatch comes round,
so a fit (and above all the scoring of new sequences under concentrated priors) is faster from
a good start. ``init_offsets(batch, priors) -> {site: offsets (B,) + event}`` gives one, e.g.
:func:`ldhmm.models.pyro_model.ldhmm_pf_offsets`, the closed-form PF E-step's expected counts;
:func:`ldhmm.inference.svi.svi_fit.fit_svi` calls :meth:`DirichletMeanField.initialize` with every
minibatch before the first step.

Any latent site in the plate that is neither Dirichlet nor enumerated is an error that names
it (use an autoguide such as ``AutoNormal`` or a hand-written guide there).
"""

from __future__ import annotations

import contextlib

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.messenger import Messenger
from torch.distributions import constraints

from .minibatch import SequenceBatch
from .model_check import ModelCheckError, in_sequence_plate, is_enumerated, sample_sites

__all__ = [
    "check_offset_sites",
    "held_out_offsets",
    "SVI_MIN_CONCENTRATION",
    "CONCENTRATION",
    "DirichletMeanField",
    "GuardedDirichlet",
    "dirichlet_concentration",
    "prior_trace",
]

#: Smallest Dirichlet concentration of the SVI route's models and guides. A reparameterized
#: draw of an entry with concentration c falls below the smallest float (e^-708, where torch
#: clamps it) with probability about e^(-708 c): 8e-4 at c = 0.01, 7e-7 at 0.02, 4e-16 at 0.05.
#: A clamped draw is a point the density was not evaluated at, and an optimizer that pushes
#: concentrations towards 0 exploits that bias without end (a mixture fit on Entree climbed to
#: a "bound" of +19 nats per token with concentrations of 1e-117). Kept above this value, such
#: draws stay rare and :class:`GuardedDirichlet` zeroes their gradients.
SVI_MIN_CONCENTRATION = 0.02

#: The constraint of a learned concentration in a model of the route.
CONCENTRATION = constraints.greater_than(SVI_MIN_CONCENTRATION)

#: Dimension of the first enumerated variable in :func:`prior_trace` (left of a plate of draws).
_FIRST_ENUM_DIM = -3


def dirichlet_concentration(fn) -> torch.Tensor | None:
    """The concentration of a (possibly ``Independent``/masked) Dirichlet, or None."""
    while not isinstance(fn, dist.Dirichlet) and hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn.concentration if isinstance(fn, dist.Dirichlet) else None


class _FiniteGradient(torch.autograd.Function):
    """The identity, whose backward turns NaN and infinite gradient entries into 0."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.where(torch.isfinite(grad), grad, torch.zeros((), dtype=grad.dtype))


class GuardedDirichlet(dist.Dirichlet):
    """A Dirichlet whose draws pass a gradient guard.

    A draw that underflows to the smallest normal float (torch clamps it there) has
    ``d log x / dx = 1 / x = 4.5e307``, and the gradients of prior, guide and likelihood at
    that entry overflow into ``inf - inf = NaN``. The guard gives such an entry a zero
    pathwise gradient instead of poisoning the step; with concentrations above
    :data:`SVI_MIN_CONCENTRATION` it is a rare event.
    """

    def rsample(self, sample_shape=()):
        return _FiniteGradient.apply(super().rsample(torch.Size(sample_shape)))


class _PriorMeans(Messenger):
    """Latent continuous sites take their prior mean instead of a draw (no randomness spent)."""

    def _pyro_sample(self, msg):
        if msg["is_observed"] or msg["value"] is not None or is_enumerated(msg):
            return
        try:
            msg["value"] = msg["fn"].mean
        except NotImplementedError:
            return
        msg["done"] = True


def prior_trace(model, batch: SequenceBatch):
    """A blocked trace of ``model`` on ``batch``: latent sites at their prior means, enumerated
    sites enumerated from dimension -3; nothing of it reaches an enclosing trace."""
    run = poutine.enum(_PriorMeans()(model), first_available_dim=_FIRST_ENUM_DIM)
    return poutine.block(poutine.trace(run).get_trace)(batch)


def _site_prior(trace, name: str, event_shape: tuple) -> torch.Tensor:
    """The prior concentration at a site, shape (B or 1,) + event: the minimum over enumerated
    values and over any other dimension left of the plate."""
    conc = dirichlet_concentration(trace.nodes[name]["fn"])
    n_event = len(event_shape)
    lead = conc.dim() - n_event - 1
    if lead > 0:
        conc = conc.reshape((-1,) + tuple(conc.shape[lead:])).amin(0)
    elif lead < 0:
        conc = conc.reshape((1,) + tuple(conc.shape[-n_event:]))
    return conc


def _name_of(function) -> str:
    target = getattr(function, "func", function)  # a functools.partial names its function
    return getattr(target, "__qualname__", None) or type(target).__qualname__


@contextlib.contextmanager
def held_out_offsets(guide):
    """Within the block, ``guide``'s ``init_offsets`` is its held-out variant, where it has one
    (the function's attribute ``held_out``, e.g. :func:`ldhmm.models.pyro_model.ldhmm_pf_offsets`:
    a fit starts the rows from a fit's E-step, the held-out local fit from the held-out E-step,
    which reaches the closed form's held-out bound); restored afterwards."""
    start = getattr(guide, "init_offsets", None)
    held_out = getattr(start, "held_out", None)
    if held_out is None:
        yield guide
        return
    guide.init_offsets = held_out
    try:
        yield guide
    finally:
        guide.init_offsets = start


def check_offset_sites(init_offsets, batch, sites: dict) -> None:
    """Check that the model has the sites an ``init_offsets`` says it needs, with their shapes.

    An ``init_offsets`` may declare them as an attribute ``sites(batch) -> {site: event shape}``
    (:func:`ldhmm.models.pyro_model.ldhmm_pf_offsets` needs LDHMM's ``pi`` (K,), ``A`` (K, K)
    and ``B`` (K, V)); ``sites`` are the model's Dirichlet sites in the sequence plate, name to
    event shape.

    Raises
    ------
    ModelCheckError
        Naming the sites that are missing or of another shape.
    """
    declared = getattr(init_offsets, "sites", None)
    if declared is None:
        return
    needed = dict(declared(batch))
    missing = [name for name in needed if name not in sites]
    if missing:
        raise ModelCheckError(
            f"init_offsets {_name_of(init_offsets)} needs the model's Dirichlet sites "
            f"{', '.join(repr(n) for n in needed)} (inside the sequence plate); the model has no "
            f"{', '.join(repr(n) for n in missing)} (its sites: {', '.join(sites) or 'none'}): name them so, "
            f"or give init_offsets for your own sites"
        )
    for name, shape in needed.items():
        if tuple(sites[name]) != tuple(shape):
            raise ModelCheckError(
                f"init_offsets {_name_of(init_offsets)} needs site {name!r} of event shape "
                f"{tuple(shape)}; the model's is {tuple(sites[name])}"
            )


class DirichletMeanField:
    """Per-sequence Dirichlet ``q`` for every Dirichlet site of ``model`` in plate ``"sequences"``.

    Parameters
    ----------
    model : callable
        A model of the route (``model(batch)``).
    relative : bool
        ``g_m = prior + delta_m`` (default) or ``g_m`` free (see the module docstring).
    init_offset : float
        Starting value of every entry of ``delta_m`` (relative form).
    init_offsets : callable, optional
        ``init_offsets(batch, priors)``: starting offsets of a batch's rows, a dict from site
        name to a non-negative Tensor of shape (B,) + event; ``priors`` maps each site to its
        prior concentration, shape (B or 1,) + event. Sites it leaves out start at
        ``init_offset``. In the free form (``relative=False``) a row starts at prior + offsets.
        It may declare the sites it needs (``sites(batch) -> {site: event shape}``, an
        attribute): they are checked before it runs (:func:`check_offset_sites`), and a
        missing one is a :class:`ModelCheckError` naming it.
    prefix : str
        Parameter names are ``prefix + site name``.

    Calling it with a :class:`~ldhmm.inference.svi.minibatch.SequenceBatch` is the Pyro guide.
    """

    def __init__(
        self, model, relative: bool = True, init_offset: float = 0.5, init_offsets=None, prefix: str = "q_"
    ):
        if not init_offset > 0:
            raise ValueError(f"init_offset must be > 0, got {init_offset}")
        if init_offsets is not None and not callable(init_offsets):
            raise ValueError(f"init_offsets must be callable or None, got {init_offsets!r}")
        self.model = model
        self.relative = bool(relative)
        self.init_offset = float(init_offset)
        self.init_offsets = init_offsets
        self.prefix = prefix
        self._sites = None  # name -> event shape, from the first trace

    @staticmethod
    def _read_sites(trace) -> dict:
        sites = {}
        for name, site in sample_sites(trace):
            if site["is_observed"] or is_enumerated(site):
                continue
            if not in_sequence_plate(site):
                continue  # a global latent: not this guide's (the model check reports it)
            if dirichlet_concentration(site["fn"]) is None:
                raise ModelCheckError(
                    f"model site {name!r} is a {type(site['fn']).__name__}, not a Dirichlet: "
                    "DirichletMeanField guides Dirichlet sites only (use AutoNormal or your own guide)"
                )
            sites[name] = tuple(site["fn"].event_shape)
        return sites

    def _initial_rows(self, prior: torch.Tensor, event_shape: tuple, n_sequences: int) -> torch.Tensor:
        if self.relative:
            return torch.full((n_sequences,) + event_shape, self.init_offset, dtype=prior.dtype)
        row = prior.detach().reshape((-1,) + event_shape).mean(0).clamp_min(2 * SVI_MIN_CONCENTRATION)
        return row.expand((n_sequences,) + event_shape).clone()

    def _priors(self, trace) -> dict:
        return {name: _site_prior(trace, name, shape) for name, shape in self._sites.items()}

    def local_start(self, batch: SequenceBatch) -> dict:
        """Starting rows of ``batch``'s local parameters from ``init_offsets`` under the current priors.

        Returns
        -------
        dict from parameter name (``prefix + site``) to its constrained rows, shape (B,) + event:
        ``delta_m`` (relative form) or ``prior + delta_m``; empty without ``init_offsets``.
        """
        return self._start_rows(batch)[0]

    def _start_rows(self, batch: SequenceBatch) -> tuple[dict, dict]:
        """:meth:`local_start`'s rows and the priors (site to concentration) they were made under."""
        if self.init_offsets is None:
            return {}, {}
        trace = prior_trace(self.model, batch)
        if self._sites is None:
            self._sites = self._read_sites(trace)
        priors = self._priors(trace)
        check_offset_sites(self.init_offsets, batch, self._sites)
        with torch.no_grad():
            try:
                offsets = self.init_offsets(batch, {k: v.detach() for k, v in priors.items()})
            except KeyError as err:  # a start written for other sites than the model's
                site = err.args[0] if err.args else None
                if not isinstance(site, str) or site in priors:
                    raise
                raise ModelCheckError(
                    f"init_offsets {_name_of(self.init_offsets)} asked for site {site!r}, which is not a "
                    f"Dirichlet site of the model in the sequence plate (those are: {', '.join(self._sites)})"
                ) from None
        out = {}
        for name, event_shape in self._sites.items():
            if name not in offsets:
                continue
            value = torch.as_tensor(offsets[name], dtype=batch.dtype).detach()
            if value.shape != (batch.batch_size,) + event_shape:
                raise ValueError(
                    f"init_offsets gave site {name!r} shape {tuple(value.shape)}, expected "
                    f"{(batch.batch_size,) + event_shape}"
                )
            if not bool((value >= 0).all()):
                raise ValueError(f"init_offsets gave site {name!r} negative offsets")
            if not self.relative:
                value = priors[name].detach() + value
            floor = torch.finfo(value.dtype).tiny if self.relative else 2 * SVI_MIN_CONCENTRATION
            out[self.prefix + name] = value.clamp_min(floor)
        return out, priors

    def initialize(self, batches) -> None:
        """Start every sequence's rows from ``init_offsets`` (no-op without it).

        Parameters
        ----------
        batches : list of SequenceBatch
            Minibatches that together hold every sequence of the database once.
        """
        if self.init_offsets is None or not batches:
            return
        store = pyro.get_param_store()
        full = {}
        for batch in batches:
            rows, priors = self._start_rows(batch)
            for pname, value in rows.items():
                if pname not in full:
                    if pname in store:
                        full[pname] = store[pname].detach().clone()
                    else:
                        site = pname[len(self.prefix) :]
                        full[pname] = self._initial_rows(priors[site], self._sites[site], batch.n_sequences)
                full[pname][batch.index] = value
        for pname, value in full.items():
            if pname in store:
                store[pname] = value
            else:
                store.setdefault(pname, value, constraints.positive if self.relative else CONCENTRATION)

    def __call__(self, batch: SequenceBatch):
        store = pyro.get_param_store()
        names = [self.prefix + name for name in (self._sites or {})]
        needs_prior = self._sites is None or self.relative or any(n not in store for n in names)
        trace = prior_trace(self.model, batch) if needs_prior else None
        if self._sites is None:
            self._sites = self._read_sites(trace)
        priors = self._priors(trace) if trace is not None else {}
        with batch.plate():
            for name, event_shape in self._sites.items():
                pname = self.prefix + name
                init = None
                if pname not in store:
                    init = self._initial_rows(priors[name], event_shape, batch.n_sequences)
                constraint = constraints.positive if self.relative else CONCENTRATION
                local = pyro.param(pname, lambda v=init: v, constraint=constraint, event_dim=len(event_shape))
                conc = priors[name] + local if self.relative else local
                pyro.sample(name, GuardedDirichlet(conc).to_event(len(event_shape) - 1))
