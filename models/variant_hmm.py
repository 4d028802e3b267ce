"""scikit-learn style estimator over any parameter-sharing variant of the LDHMM family.

:class:`VariantHMM` is the user's surface: its settings, the learned state, and methods that
delegate. The math goes to :mod:`ldhmm.inference`; a fit's run (in process or over partitions,
its checkpoint, the learned attributes it sets) to :mod:`ldhmm.models.variant_fit`, where it
starts and which run it keeps to :mod:`ldhmm.models.fit_starts`, where the data lives and whether
it fits to :mod:`ldhmm.models.placement`; the held-out passes to :mod:`ldhmm.models.held_out` and
their results' shapes to :mod:`ldhmm.models.held_out_answers`; fits along K to
:mod:`ldhmm.models.path`; the model file to :mod:`ldhmm.models.file_format`.
:class:`ldhmm.models.ldhmm.LDHMM`, :class:`ldhmm.baselines.vbhmm.VBHMM` and
:class:`ldhmm.baselines.hmmv.HMMV` are this class with a different
:class:`ldhmm.inference.ParameterSharing`. It is a :class:`ldhmm.models.base.SequenceModel`, the
base of every model the harness runs (input checks, the fitted check, the configuration read off
the constructor).

Saved models are JSON (see :meth:`VariantHMM.save`): human-readable, exact for float64 (Python's
float repr round-trips), and never executable.
"""

from __future__ import annotations

import os

import numpy as np

from ..data.seeds import derived_seeds
from ..inference import ParameterSharing, VariantParameters, VariationalEM, resolve_guide
from ..inference.cavi.emissions import emission_layout as layout_of
from ..inference.distributed.workers import PartitionWorker
from .base import SequenceModel, check_n_symbols
from .description import ModelDescription, describe_model
from .emission_context import InitSignature, contextual_model
from .file_format import FORMAT_VERSION, read_model_file, write_model_file
from .fit_settings import DTYPES as _DTYPES
from .fit_settings import TakesFitSettings
from .fit_starts import initial_parameters
from .held_out import by_key, held_out, in_input_order, in_memory
from .held_out_answers import (
    bound_family,
    first_impossible_events,
    importance_log_marginals,
    posterior_arrays,
)
from .path import fit_path
from .placement import Placement
from .variant_fit import buckets_of, check_fit_arguments, fit_in_process, fit_partitioned

__all__ = ["VariantHMM", "FORMAT_VERSION", "keeps_path_state"]


class VariantHMM(SequenceModel, TakesFitSettings):
    """Variational EM estimator for a member of the LDHMM family.

    The arguments from ``prior_concentration`` on are keyword-only; those from ``max_iter`` on
    are the fitting settings of every variant (:class:`ldhmm.models.fit_settings.FitSettings`).

    Parameters
    ----------
    n_states : int
        K >= 1.
    n_symbols : int, optional
        V; inferred from the training data (max symbol + 1) when omitted.
    sharing : ParameterSharing
        Which of pi, A, B is per-sequence, shared or a point estimate.
    guide : "pf", "ff" or a guide object
        Variational family of q(Z) (see :mod:`ldhmm.inference.cavi.guides`).
    prior_concentration : float
        Entry of fixed Dirichlet priors (shared groups; per-sequence groups if not learned).
    seed : int
    verbose : bool
        Progress bar over EM iterations.
    emission_context : None, ``"previous"`` or int 1..8
        Not None: the contextual model of this sharing (:mod:`ldhmm.models.emission_context`).
    {fit_settings}
    """

    name = "variant"
    score_kind = "lower_bound"
    # the sharing is written to its own section of a model file (and fixed by each subclass)
    _not_config = ("sharing", "verbose", "emission_context")

    __signature__ = InitSignature()  # what inspect shows: __init__'s arguments, not __new__'s

    def __new__(cls, *args, emission_context=None, **kwargs):
        if emission_context is None:
            return super().__new__(cls)
        return contextual_model(cls, emission_context, args, kwargs)  # models/emission_context.py

    def __init__(
        self,
        n_states: int,
        n_symbols: int | None = None,
        sharing: ParameterSharing | None = None,
        guide="pf",
        *,
        prior_concentration: float = 1.0,
        seed: int = 0,
        verbose: bool = False,
        emission_context=None,
        **settings,
    ):
        super().__init__(n_states, seed)
        self.emission_context = emission_context  # None here: a context made another class (__new__)
        self.n_symbols = check_n_symbols(n_symbols)
        if prior_concentration <= 0:
            raise ValueError(f"prior_concentration must be > 0, got {prior_concentration}")
        self.sharing = sharing if sharing is not None else ParameterSharing()
        self.guide = resolve_guide(guide)
        self.prior_concentration = prior_concentration
        self.verbose = verbose
        self._store_fit_settings(settings)

    @property
    def score_family(self) -> str:
        """The held-out bound's variational family (:func:`ldhmm.models.held_out_answers.bound_family`);
        bounds are compared only within one family (:mod:`ldhmm.experiments.measures`)."""
        return bound_family(self.guide, self.sharing)

    # ---- what the parts of a fit are built from ---------------------------------------------
    @property
    def torch_dtype(self):
        """The torch dtype of the parameters and per-sequence state (``dtype``)."""
        return _DTYPES[self.dtype]

    def _engine(self, guide=None, checkpoint=None) -> VariationalEM:
        """The EM driver with this model's settings (``guide`` for another guide)."""
        settings = self.fit_settings.arguments(VariationalEM)
        guide = self.guide if guide is None else guide
        return VariationalEM(guide, progress=self.verbose, checkpoint=checkpoint, **settings)

    def placement(self) -> Placement:
        """Where this model's partitions live and whether they fit
        (:class:`ldhmm.models.placement.Placement`)."""
        options = {"guide": self.guide, "n_symbols": self.n_symbols_, "sparse": self.sparse_emissions}
        options.update(self.fit_settings.arguments(PartitionWorker))
        return Placement(self.n_states, self.n_symbols_, self.bucket_cells, self.sparse_emissions, options)

    def __sklearn_is_fitted__(self) -> bool:
        # n_symbols_ is set before EM runs, so only the learned parameters say it finished
        return hasattr(self, "params_")

    @property
    def sparse_emissions(self) -> bool:
        """Whether this model stores per-sequence emission counts sparsely (decided from K, V)."""
        return layout_of(self.n_states, self.n_symbols_, self.emission_layout) == "sparse"

    def _buckets(self, seqs):
        return buckets_of(self, seqs)

    def _set_params(self, params: VariantParameters):
        self.params_ = params
        self.n_symbols_ = self.n_features_in_ = params.n_symbols

    # ---- fitting -------------------------------------------------------------------------
    def initial_parameters(self, seqs, seed: int | None = None) -> VariantParameters:
        """The seeded, asymmetric starting point of a restart for a validated database
        (:func:`ldhmm.models.fit_starts.initial_parameters`)."""
        return initial_parameters(self, np.bincount(np.concatenate(seqs), minlength=self.n_symbols_), seed)

    def fit(
        self,
        sequences,
        init_params: VariantParameters | None = None,
        backend: str = "local",
        client=None,
        n_partitions: int | None = None,
        grown: tuple = (),
        checkpoint=None,
    ):
        """Learn the database-level parameters by variational EM (where it starts and which run
        it keeps: :mod:`ldhmm.models.fit_starts`).

        Parameters
        ----------
        sequences : list of 1-D integer arrays (symbols in 0..V-1), a SequenceDatabase, or a
            directory written by :func:`ldhmm.data.write_partitioned` (each partition's worker
            then reads its own files; the tokens never pass through this process)
        init_params : VariantParameters, optional
            One run from this start, instead of the effort preset's starts.
        backend : {"local", "dask"}
            Where the partitions live: in this process, or as Dask actors on the workers of
            ``client`` (a ``distributed.Client``): the same numbers (docs/distributed.md).
        client : distributed.Client, optional
        n_partitions : int, optional
            Partitions balanced by tokens (default: one in process, two per Dask worker).
            Results depend on the partitioning in the last digits, not on the number of workers.
        grown : ldhmm.models.path.GrownStarts, optional
            Starts grown from a fit with fewer states, raced after the preset's
            (:meth:`fit_path`). Not with ``init_params``.
        checkpoint : str or Path, optional
            A directory the fit's state is written to after every EM iteration, and resumed
            from by a fit with the same settings and data (:mod:`ldhmm.inference.checkpoint`).
            Not with ``grown``.

        Returns
        -------
        self
        """
        check_fit_arguments(init_params, grown, checkpoint)
        if backend == "local" and n_partitions is None and not isinstance(sequences, (str, os.PathLike)):
            return super().fit(sequences, init_params=init_params, grown=grown, checkpoint=checkpoint)
        fit_partitioned(self, sequences, backend, client, n_partitions, init_params, grown, checkpoint)
        return self

    @classmethod
    def fit_path(cls, sequences, states, *, previous=None, callback=None, **options) -> dict:
        """Fit a model at every K of ``states``, each K after the first grown from the fit before it.

        The first K is fitted as :meth:`fit` fits it; every later K also races starts grown from
        the previous fit by splitting one of its states in two, and keeps the run with the
        highest final training ELBO (:mod:`ldhmm.models.path`; docs/math.md, "Growing K by
        splitting a state"). Reproducible: the splits are seeded from ``seed``, K and the state.

        Parameters
        ----------
        sequences : list of 1-D integer arrays, or a SequenceDatabase (in this process)
        states : iterable of int
            Strictly increasing K values, e.g. ``range(2, 7)``.
        previous : fitted model of this class, optional
            A fit with fewer states to grow the first K from (to resume a path).
        callback : callable, optional
            ``callback(K, model)`` after each K is fitted (to save it).
        **options
            Constructor arguments of every model (``n_symbols``, ``seed``, ``path_n_init``, ...).

        Returns
        -------
        dict {K: fitted model} in the order of ``states``; each model's ``path_start_`` says how
        its kept run started (``"restart"`` or ``"split:k"``).
        """
        return fit_path(cls, sequences, states, previous=previous, callback=callback, **options)

    def _fit(self, seqs, n_symbols, init_params=None, grown: tuple = (), checkpoint=None):
        fit_in_process(self, seqs, init_params, grown, checkpoint)

    def restart_seeds(self) -> list[int]:
        """The seeds of the restarts (:func:`ldhmm.data.seeds.derived_seeds` of ``seed``): ``n_init``,
        or as many as the fit ran (a path's K after the first runs ``min(n_init, path_n_init)``)."""
        ran = getattr(self, "restart_elbo_histories_", None)
        return derived_seeds(self.seed, len(ran) if ran else self.n_init)

    # ---- scoring -------------------------------------------------------------------------
    def score_samples(self, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
        """Per-sequence held-out ELBO in nats (the paper's measure; a lower bound on log p(x)).

        A sequence the model gives probability 0 (:meth:`impossible_events`) scores -inf, never
        NaN.

        Parameters
        ----------
        sequences : list of 1-D integer arrays, or (partitioned) a directory written by
            :func:`ldhmm.data.write_partitioned`
        backend, client, n_partitions : as in :meth:`fit` (the E-step runs where each partition lives)
        out : str, optional
            A directory: each partition writes ``out/part-<i>.parquet`` (columns ``sequence``,
            ``elbo``) where it runs, and the list of those paths is returned.

        Returns
        -------
        np.ndarray, shape (M,), in the input order (a pandas Series indexed by id for a
        directory input), or the Parquet paths written with ``out``.
        """
        found = held_out(self, "score", sequences, backend, client, n_partitions, out)
        return found if out is not None else by_key(*found, "elbo")

    def impossible_events(self, sequences) -> np.ndarray:
        """Where the model gives each sequence probability 0 (:mod:`ldhmm.inference.cavi.support`):
        (M, 2) int64, in the input order, the position and symbol of the first event no state path
        reaches, or (-1, -1). :meth:`score_samples` scores such a sequence -inf; the other
        per-sequence methods raise :class:`ldhmm.inference.cavi.support.ImpossibleSequenceError`.
        """
        return first_impossible_events(self, sequences)

    def _score_samples(self, seqs):
        return self.score_samples(seqs)

    def posterior(self, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
        """Per-sequence variational parameters after the held-out E-step.

        ``sequences``, ``backend``, ``client``, ``n_partitions``, ``out`` as in
        :meth:`score_samples` (the Parquet rows: docs/distributed.md, read back by
        :func:`ldhmm.inference.cavi.posterior.read_posterior`).

        Returns
        -------
        dict with, for every per-sequence group, ``g_pi`` (M, K), ``g_A`` (M, K, K), ``g_B``
        (M, K, V) (Dirichlet parameters of q), ``state_marginals`` (list of (N_m, K) arrays),
        ``elbo`` (M,); a directory input adds ``sequence`` (the M ids). In the sparse emission
        layout (:attr:`sparse_emissions`) ``B_symbols`` (list of (D_m,) int64) and ``B_counts``
        (list of (K, D_m)) stand for ``g_B``: ``q(B_m) = Dir(beta + n_m)``
        (:func:`ldhmm.inference.cavi.emissions.dense_emission_posterior` forms ``g_B``).
        A sequence of probability 0 raises ``ValueError``: it has no posterior.
        """
        return posterior_arrays(self, sequences, backend, client, n_partitions, out)

    def predict_next_proba(
        self, sequences, backend: str = "local", client=None, n_partitions=None
    ) -> np.ndarray:
        """Posterior predictive distribution of the next symbol of each sequence.

        After the held-out E-step, ``p(x_(n+1) = v | x_1..x_n) = sum_(i,j) q(z_n = i)
        E_q[A_m][i, j] E_q[B_m][j, v]`` (docs/math.md, "Next-event prediction and decoding";
        :func:`ldhmm.inference.cavi.posterior.next_symbol_proba`).

        Parameters
        ----------
        sequences : list of 1-D integer arrays, each with at least one symbol
        backend, client, n_partitions : as in :meth:`fit`

        Returns
        -------
        np.ndarray, shape (M, V), float64, in the input order; rows sum to 1.
        """
        results, _ = held_out(self, "predict_next_proba", in_memory(sequences), backend, client, n_partitions)
        return by_key(results, False)

    def decode(self, sequences, backend: str = "local", client=None, n_partitions=None) -> list:
        """Most probable hidden-state path of each sequence under its posterior-mean parameters
        (Viterbi after the held-out E-step: :func:`ldhmm.inference.cavi.posterior.viterbi_paths`).

        Returns
        -------
        list of np.ndarray, each (N_m,) int64 (states in 0..K-1), in the input order.
        """
        results, _ = held_out(self, "decode", in_memory(sequences), backend, client, n_partitions)
        return in_input_order(results)

    def describe(
        self, data=None, *, baseline=None, n_clusters: int = 3, n_examples: int = 2, seed: int = 0
    ) -> ModelDescription:
        """The model explained as tables (pandas DataFrames): what ``ldhmm report`` shows
        (:func:`ldhmm.models.description.describe_model` documents every argument).

        ``data``: users in the model's codes (list of 1-D int arrays or SequenceDatabase);
        ``baseline``: e.g. ``"MARKOV1"``, fitted on the users' prefixes for next-event accuracy.

        Returns
        -------
        ModelDescription: ``.tables()``, the DataFrames by name (``summary``, ``states``, ...).
        """
        return describe_model(
            self, data, baseline=baseline, n_clusters=n_clusters, n_examples=n_examples, seed=seed
        )

    def log_marginal_is(
        self,
        sequences,
        n_samples: int = 100,
        seed: int = 0,
        backend: str = "local",
        client=None,
        n_partitions=None,
        out=None,
        diagnostics: bool = False,
    ) -> np.ndarray:
        """Importance-sampled estimate of ``log p(x_m)`` per sequence (docs/math.md, held-out scoring).

        The proposal is the fitted ``q(theta_m)``; ``log p(x | theta_s)`` is exact. Its
        expectation is a lower bound on ``log p(x)`` that tightens with ``n_samples`` and is at
        least the ELBO on average; shared groups (VBHMM) are sampled from their posterior (the
        predictive ``log p(x | training data)``).

        Parameters
        ----------
        sequences, backend, client, n_partitions, out : as in :meth:`score_samples` (columns
            ``sequence``, ``log_marginal``)
        n_samples : int
        seed : int
            Seeds the draws: partition 0 from ``seed``, partition p of a partitioned run from
            ``SeedSequence([seed, p])`` (estimates depend on the partitioning, not on workers).
        diagnostics : bool
            Return an :class:`~ldhmm.inference.ops.importance.ImportanceEstimate` (standard
            errors, effective sample sizes; sequences in memory only).

        Returns
        -------
        np.ndarray, shape (M,) (a Series by id for a directory input), the Parquet paths
        written with ``out``, or with ``diagnostics`` an ``ImportanceEstimate``.
        """
        return importance_log_marginals(
            self, sequences, n_samples, seed, backend, client, n_partitions, out, diagnostics
        )

    # ---- persistence ---------------------------------------------------------------------
    def get_config(self) -> dict:
        """The settings a model file records (see :meth:`SequenceModel.get_config`).

        A guide is recorded by its name (``"pf"``, ``"ff"``; a user-written guide by its
        ``name`` or ``"custom"``): guides are code, and a model file is never executable.
        """
        return {**super().get_config(), "guide": getattr(self.guide, "name", "custom")}

    def save(self, path, vocabulary=None) -> None:
        """Write the fitted model as JSON, atomically (:func:`ldhmm.models.file_format.write_model_file`).

        An array of 65,536 entries or more (B at large vocabularies) goes to an NPZ side file
        ``<name>.<digest>.npz`` beside the model: copy both. ``vocabulary``: the names of the V
        symbols (default ``vocabulary_``), so that a log is mapped into the model's codes by name.
        """
        self._check_fitted()
        write_model_file(path, self, vocabulary)

    @classmethod
    def load(cls, path, guide=None):
        """Read a model written by :meth:`save` (:func:`ldhmm.models.file_format.read_model_file`).

        Every field is checked against the schema (types, ranges, shapes, finiteness) before
        anything is built; a bad file is one ``ValueError`` line naming the file and the field.
        ``guide``: needed for a model fitted with a custom guide (saved by its name only).
        """
        return read_model_file(path, cls, guide)

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(sharing=sharing, guide=guide, **config)


def keeps_path_state(cls) -> bool:
    """Whether ``cls.fit_path`` is this module's (:meth:`VariantHMM.fit_path`, which runs
    :func:`ldhmm.models.path.fit_path`): it keeps each K's per-sequence state for the next K, so a
    path resumed from a saved fit needs that state to go on as the uninterrupted path does. A
    class with a ``fit_path`` of its own (a plug-in's, the contextual models') keeps none."""
    own = getattr(getattr(cls, "fit_path", None), "__func__", None)
    return own is VariantHMM.fit_path.__func__
