"""Checks of a user's Pyro model and guide before the SVI route runs them (errors name the site).

A model of the route (:mod:`ldhmm.inference.svi.svi_fit`) is called with one
:class:`~ldhmm.inference.svi.minibatch.SequenceBatch` and must

* put every per-sequence variable inside ``batch.plate()`` (``pyro.plate("sequences", dim=-1)``,
  the only plate: other dimensions of a variable are its event, ``.to_event(n)``);
* give every sample site inside that plate a log-density of shape ``(B,)``, one number per
  sequence (a site whose log-density has more dimensions has not summed its positions or
  states);
* observe the data (at least one observed site or ``pyro.factor``);
* leave each latent site to the guide, or mark a discrete one
  ``infer={"enumerate": "parallel"}`` so that ``TraceEnum_ELBO`` sums it out.

:func:`check_model` runs guide and model once on a batch and raises :class:`ModelCheckError`
naming the first site that breaks a rule (or, for an error raised inside the user's code, the
last site that ran before it).
"""

from __future__ import annotations

import pyro
from pyro import poutine
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from .minibatch import PLATE, SequenceBatch

__all__ = ["ModelCheckError", "check_model", "in_sequence_plate", "is_enumerated", "sample_sites"]


class ModelCheckError(ValueError):
    """A model or guide that the SVI route cannot run; the message names the site."""


class _LastSite(Messenger):
    """Remembers the name of the last site that completed (for errors raised between sites)."""

    def __init__(self):
        super().__init__()
        self.name = None

    def _postprocess_message(self, msg):
        if msg["type"] in ("sample", "param"):
            self.name = msg["name"]


def in_sequence_plate(site: dict) -> bool:
    """Whether a trace site lies inside the plate ``"sequences"``."""
    return any(frame.name == PLATE for frame in site["cond_indep_stack"])


def is_enumerated(site: dict) -> bool:
    """Whether a sample site asks to be summed out by enumeration."""
    return site["type"] == "sample" and site["infer"].get("enumerate") is not None


def sample_sites(trace):
    """``(name, site)`` of the sample sites of a trace, less the plates' subsample sites."""
    return [
        (name, site)
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site_is_subsample(site)
    ]


def _run(role: str, fn, batch: SequenceBatch, trace=None):
    tracker = _LastSite()
    try:
        with tracker:
            runner = fn if trace is None else poutine.replay(fn, trace=trace)
            return poutine.trace(runner).get_trace(batch)
    except ModelCheckError:
        raise
    except Exception as err:  # the user's code: name where it broke
        text = " ".join(str(err).split())
        where = (
            ""
            if "site" in text
            else f" (after site {tracker.name!r})"
            if tracker.name
            else " (before any site)"
        )
        raise ModelCheckError(f"the {role} failed{where}: {type(err).__name__}: {text}") from err


def _site_log_prob(role: str, name: str, site: dict):
    try:
        return site["fn"].log_prob(site["value"])
    except Exception as err:
        text = " ".join(str(err).split())
        raise ModelCheckError(f"{role} site {name!r}: log_prob failed: {type(err).__name__}: {text}") from err


def _check_shapes(role: str, trace, batch: SequenceBatch) -> None:
    B = batch.batch_size
    for name, site in sample_sites(trace):
        log_p = _site_log_prob(role, name, site)
        shape = tuple(log_p.shape)
        if in_sequence_plate(site):
            if shape not in ((B,), (1,), ()):
                raise ModelCheckError(
                    f"{role} site {name!r}: log-density of shape {shape}, expected ({B},), one number per "
                    "sequence: declare the other dimensions as the event (.to_event(n)) or sum them, "
                    "and use no plate but batch.plate()"
                )
        elif shape != ():
            raise ModelCheckError(
                f"{role} site {name!r}: outside plate {PLATE!r} its log-density must be a scalar, got "
                f"shape {shape}; per-sequence variables belong inside batch.plate()"
            )


def check_model(model, guide, batch: SequenceBatch) -> bool:
    """Run ``model`` alone, then ``guide`` and ``model`` replayed on it, on ``batch``, and check
    them against the rules above.

    Parameters
    ----------
    model, guide : callable
        Pyro model and guide of one :class:`SequenceBatch`.
    batch : SequenceBatch

    Returns
    -------
    bool
        Whether the model has sites to enumerate (then the route uses ``TraceEnum_ELBO``).

    Raises
    ------
    ModelCheckError
        Naming the first offending site.
    """
    with pyro.validation_enabled(True):
        _check_shapes("model", _run("model", model, batch), batch)  # the model alone first
        guide_trace = _run("guide", guide, batch)
        model_trace = _run("model", model, batch, trace=guide_trace)
        _check_shapes("model", model_trace, batch)
        _check_shapes("guide", guide_trace, batch)
    latent = {
        name
        for name, site in sample_sites(model_trace)
        if not site["is_observed"] and not is_enumerated(site)
    }
    guided = {name for name, site in sample_sites(guide_trace) if not site["infer"].get("is_auxiliary")}
    stray = sorted(guided - {name for name, _ in sample_sites(model_trace)})
    if stray:
        raise ModelCheckError(f"guide site {stray[0]!r} is not a site of the model")
    unguided = sorted(latent - guided)
    if unguided:
        raise ModelCheckError(
            f"model site {unguided[0]!r} is latent but the guide does not sample it; give it a guide "
            'site, or, if it is discrete, mark it infer={"enumerate": "parallel"} to sum it out'
        )
    observed = [name for name, site in sample_sites(model_trace) if site["is_observed"]]
    if not observed:
        raise ModelCheckError("the model observes nothing: add pyro.sample(..., obs=batch.tokens)")
    return any(is_enumerated(site) for _, site in sample_sites(model_trace))
