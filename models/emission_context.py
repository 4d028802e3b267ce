"""The ``emission_context=`` switch of :class:`VariantHMM` and :class:`LDHMM`: the same model
whose emission rows are chosen by (hidden state, context) instead of the state alone.

``LDHMM(K, emission_context="previous")`` is :class:`ldhmm.models.contextual.ContextualLDHMM`
(per-sequence pi, A and B, each (state, context) row with its learned Dirichlet prior; the PF
or FF family); a :class:`VariantHMM` whose three groups are point estimates (the HMM) with
``emission_context=`` is :class:`ldhmm.models.contextual_hmm.ContextualHMM` (Baum-Welch, the
exact score); any other sharing (HMMV's, VBHMM's, fixed priors, pi and A point with B per
sequence, ...) is a ContextualLDHMM with that ``sharing`` and ``prior_concentration``
(:mod:`ldhmm.inference.cavi.context_sharing`). The constructor
returns an instance of that class (``type(model)`` says which), so that a model file, the
harness and ``ldhmm.load_model`` see the variant they know. The settings that carry over are
those the contextual class has (``n_states``, ``n_symbols``, ``seed``, ``max_iter``, ``n_init``,
and ``tol`` and the guide, PF or FF, for LDHMM); the contextual options (:data:`CONTEXT_OPTIONS`)
are passed through; anything else given that the variant would ignore (a custom guide, the SVI
route, another setting) is refused in one line that names it.
``emission_context=None`` is the model as before, bit for bit.
"""

from __future__ import annotations

import inspect

from ..inference.contexts import check_emission_context
from ..inference.sharing import GROUPS, LDHMM_SHARING, POINT
from .contextual import ContextualLDHMM
from .contextual_hmm import ContextualHMM
from .fit_settings import SETTING_NAMES

__all__ = ["CONTEXT_OPTIONS", "InitSignature", "contextual_model", "contextual_variant"]

#: The contextual classes' own arguments, accepted beside ``emission_context=``.
CONTEXT_OPTIONS = (
    "min_context_count",
    "context_smoothing",
    "min_concentration",
    "emission_pseudocount",
    "transition_pseudocount",
)

#: The fitting settings each contextual class takes over from the plain model.
_CARRIED = {ContextualLDHMM: ("max_iter", "tol", "n_init"), ContextualHMM: ("max_iter", "n_init")}


class InitSignature:
    """A class's ``__signature__``: its ``__init__``'s arguments (without ``self``), for every
    subclass. A class that defines ``__new__`` (the switch) would otherwise show ``inspect``,
    ``help()`` and editors the ``(*args, emission_context=None, **kwargs)`` of ``__new__``."""

    def __get__(self, instance, owner) -> inspect.Signature:
        signature = inspect.signature(owner.__init__)
        return signature.replace(parameters=list(signature.parameters.values())[1:])


def contextual_model(cls, emission_context, args: tuple, kwargs: dict):
    """What ``cls(*args, emission_context=..., **kwargs)`` builds (``VariantHMM.__new__``): the
    plain model of ``cls`` from the arguments less the contextual options, made contextual
    (:func:`contextual_variant`)."""
    kwargs = dict(kwargs)
    options = {name: kwargs.pop(name) for name in CONTEXT_OPTIONS if name in kwargs}
    return contextual_variant(cls(*args, **kwargs), emission_context, options)


def _target(plain) -> type:
    kinds = {plain.sharing.kind(g) for g in GROUPS}
    target = ContextualHMM if kinds == {POINT} else ContextualLDHMM
    guide = getattr(plain.guide, "name", None)
    if target is ContextualLDHMM and guide not in ("pf", "ff"):
        raise ValueError(
            f"emission_context: the contextual LDHMM has the PF and FF families, not guide {guide!r}"
        )
    if getattr(plain, "optimizer", "cavi") != "cavi":
        raise ValueError(
            "emission_context: optimizer 'svi' is the Pyro route of ldhmm.models.pyro_contextual "
            "(ContextualSequenceModel); the estimator fits in closed form"
        )
    return target


def contextual_variant(plain, emission_context, options: dict):
    """The contextual model of the plain estimator ``plain`` (built without a context, its
    sharing, guide and settings resolved): a fresh, unfitted ContextualLDHMM or ContextualHMM.

    Parameters
    ----------
    plain : VariantHMM
    emission_context : ``"previous"`` or an int 1..8
    options : dict
        The contextual options given (:data:`CONTEXT_OPTIONS`).
    """
    if check_emission_context(emission_context) is None:
        raise ValueError("contextual_variant: emission_context is None (the plain model)")
    target = _target(plain)
    defaults = type(plain).fit_defaults
    carried = _CARRIED[target]
    ignored = [
        name
        for name in SETTING_NAMES
        if name not in carried and getattr(plain, name) != getattr(defaults, name)
    ]
    sharing = plain.sharing
    if target is ContextualHMM and getattr(plain, "prior_concentration", 1.0) != 1.0:
        ignored.append("prior_concentration")
    if ignored:
        raise ValueError(f"emission_context: {target.__name__} takes no {', '.join(ignored)}")
    settings = {
        name: getattr(plain, name) for name in carried if getattr(plain, name) != getattr(defaults, name)
    }
    if target is ContextualLDHMM:
        settings["guide"] = getattr(plain.guide, "name", "pf")
        if sharing != LDHMM_SHARING:
            settings["sharing"] = sharing
            settings["prior_concentration"] = float(getattr(plain, "prior_concentration", 1.0))
    try:
        return target(
            plain.n_states,
            n_symbols=plain.n_symbols,
            emission_context=emission_context,
            seed=plain.seed,
            **settings,
            **options,
        )
    except TypeError as err:  # an option of the other contextual class
        raise ValueError(
            f"emission_context: {target.__name__} takes no {str(err).rpartition(' ')[2]}"
        ) from None
