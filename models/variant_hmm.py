"""scikit-learn style estimator over any parameter-sharing variant of the LDHMM family.

:class:`VariantHMM` holds configuration and learned state; the math lives in
:mod:`ldhmm.inference`. :class:`ldhmm.models.ldhmm.LDHMM`, :class:`ldhmm.baselines.vbhmm.VBHMM`
and :class:`ldhmm.baselines.hmmv.HMMV` are this class with a different
:class:`ldhmm.inference.ParameterSharing`. It is a :class:`ldhmm.models.base.SequenceModel`, the
base of every model the harness runs (input checks, the fitted check, the configuration read off
the constructor).

Saved models are JSON (see :meth:`VariantHMM.save`): human-readable, exact for float64 (Python's
float repr round-trips), and never executable.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data import plan_partitions, read_manifest
from ..inference import (
    SEQUENCE,
    FitResult,
    ParameterSharing,
    PFGuide,
    VariantParameters,
    VariationalEM,
    default_starts,
    emission_potentials,
    guide_starts,
    init_parameters,
    make_buckets,
    resolve_guide,
    unpad_paths,
    viterbi_log,
)
from ..inference.cavi.emissions import (
    LOCAL_CHUNK,
    predictive_emissions,
)
from ..inference.cavi.emissions import emission_layout as layout_of
from ..inference.cavi.posterior import (
    bucket_posterior,
    emission_index,
    forbidden_symbols,
    log_marginal_is,
    posterior_means,
    stack_posterior,
    state_marginals,
)
from ..inference.distributed.workers import (
    LocalBackend,
    PartitionWorker,
    balanced_partitions,
    partition_seeds,
)
from ..inference.em import NonFiniteELBOError
from .base import SequenceModel, check_n_symbols
from .file_format import (
    FORMAT_VERSION,
    NPZ_MIN_ENTRIES,
    ModelFileError,
    check_config_types,
    named_side_file,
    side_file_name,
    validate_model_document,
)
from .fit_settings import DTYPES as _DTYPES
from .fit_settings import TakesFitSettings
from .memory import check_memory, fit_bytes, importance_sampling_bytes, score_bytes

__all__ = ["VariantHMM", "FORMAT_VERSION"]

#: Where a fit's partitions live (see :meth:`VariantHMM.fit`).
BACKENDS = ("local", "dask")


def dask_backend_module():
    """:mod:`ldhmm.inference.distributed.dask_backend`, imported on first use: Dask is an optional extra
    (``pip install -e ".[dask]"``), so the core package must import without it."""
    try:
        return importlib.import_module("ldhmm.inference.distributed.dask_backend")
    except ImportError as err:
        raise ImportError(
            f"backend='dask' needs Dask: pip install 'ldhmm[dask]' (or dask[distributed]) ({err})"
        ) from None


def dask_backend_class():
    """:class:`ldhmm.inference.distributed.dask_backend.DaskBackend` (see :func:`dask_backend_module`)."""
    return dask_backend_module().DaskBackend


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
    {fit_settings}
    """

    name = "variant"
    score_kind = "lower_bound"
    # the sharing is written to its own section of a model file (and fixed by each subclass)
    _not_config = ("sharing", "verbose")

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
        **settings,
    ):
        super().__init__(n_states, seed)
        n_symbols = check_n_symbols(n_symbols)
        if prior_concentration <= 0:
            raise ValueError(f"prior_concentration must be > 0, got {prior_concentration}")
        self.n_symbols = n_symbols
        self.sharing = sharing if sharing is not None else ParameterSharing()
        self.guide = resolve_guide(guide)
        self.prior_concentration = prior_concentration
        self.verbose = verbose
        self._store_fit_settings(settings)

    # ---- helpers -------------------------------------------------------------------------
    @property
    def _torch_dtype(self):
        return _DTYPES[self.dtype]

    def _engine(self, progress=False, guide=None) -> VariationalEM:
        return VariationalEM(
            self.guide if guide is None else guide,
            progress=progress,
            **self.fit_settings.arguments(VariationalEM),
        )

    def __sklearn_is_fitted__(self) -> bool:
        # n_symbols_ is set before EM runs, so only the learned parameters say it finished
        return hasattr(self, "params_")

    @property
    def sparse_emissions(self) -> bool:
        """Whether this model stores per-sequence emission counts sparsely (decided from K, V)."""
        return layout_of(self.n_states, self.n_symbols_, self.emission_layout) == "sparse"

    def _buckets(self, seqs):
        return make_buckets(
            seqs, max_cells=self.bucket_cells, sparse=self.sparse_emissions, n_symbols=self.n_symbols_
        )

    def _set_params(self, params: VariantParameters):
        self.params_ = params
        self.n_symbols_ = params.n_symbols
        self.n_features_in_ = self.n_symbols_

    # ---- fitting -------------------------------------------------------------------------
    def initial_parameters(self, seqs, seed: int | None = None) -> VariantParameters:
        """The seeded, asymmetric starting point of :meth:`fit` for a validated database."""
        return self._initial_from_counts(np.bincount(np.concatenate(seqs), minlength=self.n_symbols_), seed)

    def _initial_from_counts(self, symbol_counts, seed: int | None = None) -> VariantParameters:
        """:meth:`initial_parameters` from the database's symbol counts (V,)."""
        V = self.n_symbols_
        freq = np.asarray(symbol_counts).astype(np.float64)
        return init_parameters(
            self.sharing,
            self.n_states,
            V,
            symbol_frequencies=freq / freq.sum(),
            seed=self.seed if seed is None else seed,
            prior_concentration=self.prior_concentration,
            n_tokens=float(freq.sum()),
            dtype=self._torch_dtype,
        )

    def fit(
        self,
        sequences,
        init_params: VariantParameters | None = None,
        backend: str = "local",
        client=None,
        n_partitions: int | None = None,
    ):
        """Learn the database-level parameters by variational EM.

        Parameters
        ----------
        sequences : list of 1-D integer arrays (symbols in 0..V-1), a SequenceDatabase, or a
            directory written by :func:`ldhmm.data.write_partitioned` (each partition's worker
            then reads its own files; the tokens never pass through this process)
        init_params : VariantParameters, optional
            Starting point (default: :meth:`initial_parameters`).
        backend : {"local", "dask"}
            Where the partitions of the database live: in this process (``"local"``), or as
            Dask actors on the workers of ``client`` (``"dask"``; ``pip install -e ".[dask]"``).
            The same driver (:meth:`ldhmm.inference.em.VariationalEM.fit_backend`) runs both:
            on the same partitions they give the same numbers (docs/distributed.md).
        client : distributed.Client, optional
            Required by ``backend="dask"``.
        n_partitions : int, optional
            Cut the database into this many partitions balanced by token count. Default: one
            (today's in-process fit) for ``"local"``, two per Dask worker for ``"dask"``.
            Results depend on the partitioning in the last digits (sums are added per
            partition), not on the number of workers.

        Returns
        -------
        self
        """
        if backend == "local" and n_partitions is None and not isinstance(sequences, (str, os.PathLike)):
            return super().fit(sequences, init_params=init_params)
        self._fit_partitioned(sequences, backend, client, n_partitions, init_params)
        return self

    def _fit_partitioned(self, data, backend: str, client, n_partitions, init_params):
        """:meth:`fit` over partitions of the database (a directory or in-memory sequences)."""
        partitions, directory = self._partitions(data, backend, client, n_partitions, self._validate_for_fit)
        if directory:
            manifest = read_manifest(data)
            V = int(manifest["n_symbols"])
            if self.n_symbols is not None and self.n_symbols < V:
                raise ValueError(f"n_symbols={self.n_symbols} but {data} holds {V} symbols")
            self.n_symbols_ = int(self.n_symbols or V)
            self.n_features_in_ = self.n_symbols_
            vocabulary = manifest.get("vocabulary")
        else:
            vocabulary = getattr(data, "vocabulary", None)
        runner = self._runner(backend, client, partitions)
        counts = np.sum(runner.call("symbol_counts"), axis=0)
        self.n_partitions_ = runner.n_partitions
        try:
            self._fit_on(runner, counts, init_params)
        except NonFiniteELBOError as err:
            self._set_params(err.last_params)
            self.converged_ = False
            raise
        if isinstance(vocabulary, list) and len(vocabulary) == self.n_symbols_:
            self.vocabulary_ = list(vocabulary)

    def _check_memory(self, seqs, doing: str, knob: str, estimate=fit_bytes) -> None:
        """Refuse before allocating when the estimate exceeds the memory limit (models/memory.py)."""
        M, T = len(seqs), int(sum(len(x) for x in seqs))
        L = max((len(x) for x in seqs), default=0)
        K, V = self.n_states, self.n_symbols_
        check_memory(
            estimate(K, V, M, T, L, self.bucket_cells, self.sparse_emissions),
            f"{doing} K = {K} states, V = {V} symbols on {M} sequences ({T} tokens)",
            knob,
        )

    def _fit(self, seqs, n_symbols, init_params: VariantParameters | None = None):
        self._check_memory(seqs, "fitting", "fewer states (n_states / --states) or fewer sequences")
        try:
            self._fit_em(seqs, init_params)
        except NonFiniteELBOError as err:
            # Stop, and keep the last finite parameters: the model stays usable for scoring.
            self._set_params(err.last_params)
            self.converged_ = False
            raise

    def _fit_em(self, seqs, init_params: VariantParameters | None):
        # In process: the driver over one partition holding every bucket.
        engine = self._engine(progress=self.verbose)
        runner = LocalBackend([engine.worker(self._buckets(seqs), self.n_symbols_)])
        counts = np.bincount(np.concatenate(seqs), minlength=self.n_symbols_)
        self._fit_on(runner, counts, init_params)

    def _fit_on(self, runner, symbol_counts, init_params: VariantParameters | None):
        """Restarts and initialization (docs/math.md) over a backend's partitions."""
        engine = self._engine(progress=self.verbose)
        self.init_elbo_history_ = np.asarray([])
        if init_params is not None:
            result = engine.fit_backend(runner, init_params)
        elif self._init_method() == "pf":
            # The PF fit (with the restarts) first, then this guide from its parameters.
            chain = self._best_of_restarts(
                self._engine(progress=self.verbose, guide=PFGuide()), runner, symbol_counts
            )
            self.init_elbo_history_ = np.asarray(chain.elbo_history)
            result = engine.fit_backend(runner, chain.params)
        else:
            result = self._best_of_restarts(engine, runner, symbol_counts)
        self.recoveries_ = list(result.recoveries)
        self._set_params(result.params)
        self.elbo_history_ = np.asarray(result.elbo_history)
        self.e_step_elbo_history_ = np.asarray(result.e_step_elbo_history)
        self.elbo_trace_ = list(result.trace)
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.prior_capped_ = result.capped

    def restart_seeds(self) -> list[int]:
        """The seeds of the ``n_init`` starting points: ``seed`` itself, then seeds derived from
        ``(seed, r)`` (so that models with neighbouring seeds share no restart)."""
        return [self.seed] + [
            int(np.random.SeedSequence([self.seed, r]).generate_state(1)[0]) for r in range(1, self.n_init)
        ]

    def _init_method(self) -> str:
        if self.init != "auto":
            return self.init
        return "pf" if "chain" in guide_starts(self.guide) else "random"

    def _best_of_restarts(self, engine: VariationalEM, runner, symbol_counts) -> FitResult:
        """Every restart's seed (:meth:`restart_seeds`); the run with the highest final ELBO is kept."""
        result = None
        for seed in self.restart_seeds():
            run = engine.fit_backend(runner, self._initial_from_counts(symbol_counts, seed=seed))
            if result is None or run.elbo_history[-1] > result.elbo_history[-1]:
                result = run
        return result

    # ---- scoring -------------------------------------------------------------------------
    def _e_step(self, seqs):
        self._check_memory(seqs, "scoring with", "fewer sequences at a time", estimate=score_bytes)
        buckets = self._buckets(seqs)
        return buckets, self._engine().score(buckets, self.params_)

    def score_samples(self, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
        """Per-sequence held-out ELBO in nats (the paper's measure; a lower bound on log p(x)).

        Parameters
        ----------
        sequences : list of 1-D integer arrays; with ``backend="dask"`` or ``n_partitions``
            also a directory written by :func:`ldhmm.data.write_partitioned`
        backend, client, n_partitions : as in :meth:`fit`
            The held-out E-step of each partition runs where the partition lives.
        out : str, optional
            A directory: each partition writes its scores to ``out/part-<i>.parquet``
            (columns ``sequence``: database position or id, ``elbo``) where it runs, and the
            list of those paths is returned instead of the scores.

        Returns
        -------
        np.ndarray, shape (M,), in the input order (or, for a directory input, in the order of
        its ``sequence`` ids, returned as a pandas Series indexed by id), or the list of Parquet
        paths written with ``out``.
        """
        if backend == "local" and n_partitions is None and out is None:
            return super().score_samples(sequences)
        return self._score_partitioned(sequences, backend, client, n_partitions, out)

    def _score_partitioned(self, data, backend, client, n_partitions, out):
        runner, directory = self._scoring_runner(data, backend, client, n_partitions)
        starts = default_starts(self.guide, self.random_starts)
        if out is not None:
            return runner.call_each("score", [(self.params_, starts, p) for p in _part_paths(out, runner)])
        return self._collect(runner.call("score", self.params_, starts, None), directory, "elbo")

    @staticmethod
    def _collect(results, directory: bool, name: str):
        """Per-partition (keys, values) pairs as one array in database order, or a Series by id."""
        keys = np.concatenate([k for k, _ in results])
        values = np.concatenate([v for _, v in results])
        if directory:
            return pd.Series(values, index=keys, name=name)
        ordered = np.empty(len(keys))
        ordered[keys.astype(np.int64)] = values
        return ordered

    def _partitions(self, data, backend, client, n_partitions, validate):
        """Check ``backend``/``client``/``n_partitions`` and cut ``data`` (sequences, or a
        directory from :func:`ldhmm.data.write_partitioned`) into partitions balanced by tokens.

        Returns (partitions, directory): PartitionSpecs or (sequences, positions) pairs.
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "dask" and client is None:
            raise ValueError("backend='dask' needs client= (a distributed.Client)")
        if n_partitions is None:
            n_partitions = 2 * len(client.scheduler_info()["workers"]) if backend == "dask" else 1
        if (
            isinstance(n_partitions, bool)
            or not isinstance(n_partitions, (int, np.integer))
            or n_partitions < 1
        ):
            raise ValueError(f"n_partitions must be an integer >= 1, got {n_partitions!r}")
        directory = isinstance(data, (str, os.PathLike))
        if directory:
            return plan_partitions(data, int(n_partitions)), True
        seqs = validate(data)
        parts = balanced_partitions([len(s) for s in seqs], int(n_partitions))
        return [([seqs[i] for i in idx], idx) for idx in parts], False

    def _scoring_runner(self, data, backend, client, n_partitions):
        """The backend over the partitions of ``data`` for a fitted model's held-out E-step."""
        self._check_fitted()
        partitions, directory = self._partitions(
            data, backend, client, n_partitions, self._validate_for_score
        )
        return self._runner(backend, client, partitions), directory

    def _runner(self, backend, client, partitions):
        """The backend over ``partitions`` (PartitionSpecs or (sequences, positions) pairs),
        each a PartitionWorker with this model's guide, layout and E-step settings."""
        options = {
            "guide": self.guide,
            "n_symbols": self.n_symbols_,
            "sparse": self.sparse_emissions,
            **self.fit_settings.arguments(PartitionWorker),
        }
        if backend == "dask":
            return dask_backend_class()(client, partitions, options)
        workers = []
        for part in partitions:
            if isinstance(part, tuple):
                workers.append(PartitionWorker(part[0], index=part[1], **options))
            else:
                workers.append(PartitionWorker(part, **options))
        return LocalBackend(workers)

    def _score_samples(self, seqs):
        # A point-estimated B that gives a symbol probability 0 in every state (a symbol unseen
        # in training, without pseudocount) makes a sequence holding it impossible: its
        # log-likelihood, and every bound on it, is -inf (never NaN).
        possible = ~self._impossible(seqs)
        out = np.full(len(seqs), -np.inf)
        if possible.any():
            kept = [s for s, ok in zip(seqs, possible) if ok]
            buckets, states = self._e_step(kept)
            scores = np.empty(len(kept))
            for b, st in zip(buckets, states):
                scores[b.index.numpy()] = st.elbo.double().numpy()
            out[possible] = scores
        return out

    def _impossible(self, seqs) -> np.ndarray:
        """Which sequences hold a symbol that a point-estimated B forbids in every state, (M,) bool."""
        forbidden = forbidden_symbols(self.params_)
        if forbidden is None:
            return np.zeros(len(seqs), dtype=bool)
        return np.array([bool(forbidden[s].any()) for s in seqs])

    def _require_possible(self, seqs) -> None:
        """A one-line error for a sequence the model gives probability 0 (no posterior exists)."""
        bad = np.flatnonzero(self._impossible(seqs))
        if bad.size:
            i = int(bad[0])
            symbol = int(next(v for v in seqs[i] if torch.isneginf(self.params_.log_point["B"][:, v]).all()))
            raise ValueError(
                f"sequence {i} holds symbol {symbol}, to which the model's point-estimated B gives "
                f"probability 0 in every state (unseen in training; fit with a pseudocount > 0): "
                f"it has no posterior"
            )

    def posterior(self, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
        """Per-sequence variational parameters after the E-step.

        Parameters
        ----------
        sequences : list of 1-D integer arrays; with ``backend="dask"`` or ``n_partitions``
            also a directory written by :func:`ldhmm.data.write_partitioned`
        backend, client, n_partitions : as in :meth:`fit`
            The held-out E-step of each partition runs where the partition lives.
        out : str, optional
            A directory: each partition writes its sequences' posteriors to
            ``out/part-<i>.parquet`` where it runs (one row per sequence, schema in
            docs/distributed.md; :func:`ldhmm.inference.cavi.posterior.read_posterior` reads them
            back), and the list of those paths is returned instead.

        Returns
        -------
        dict with, for every per-sequence group, ``g_pi`` (M, K), ``g_A`` (M, K, K), ``g_B``
        (M, K, V) (Dirichlet parameters of q), ``state_marginals`` (list of (N_m, K) arrays),
        and ``elbo`` (M,); for a directory input also ``sequence`` (the M ids, the order of
        every other entry).

        In the sparse emission layout (:attr:`sparse_emissions`) ``g_B`` is not formed (it
        would be M x K x V); instead ``B_symbols`` (list of (D_m,) int64 arrays: each
        sequence's distinct symbols) and ``B_counts`` (list of (K, D_m) arrays: its expected
        emission counts there): ``q(B_m) = Dir(beta + n_m)`` with ``n_m`` zero at every other
        symbol. :func:`ldhmm.inference.cavi.emissions.dense_emission_posterior` turns them into
        ``g_B`` (M, K, V) where that fits in memory.
        """
        if backend != "local" or n_partitions is not None or out is not None:
            return self._posterior_partitioned(sequences, backend, client, n_partitions, out)
        seqs = self._validate_for_score(sequences)
        self._require_possible(seqs)
        buckets, states = self._e_step(seqs)
        rows = [None] * len(seqs)
        for b, st in zip(buckets, states):
            index = b.index.tolist()
            for row, values in bucket_posterior(self.params_, self.guide, b, st):
                rows[index[row]] = values
        return stack_posterior(rows, self.params_, self.sparse_emissions)

    def _posterior_partitioned(self, data, backend, client, n_partitions, out):
        runner, directory = self._scoring_runner(data, backend, client, n_partitions)
        starts = default_starts(self.guide, self.random_starts)
        if out is not None:
            return runner.call_each(
                "posterior", [(self.params_, starts, p) for p in _part_paths(out, runner)]
            )
        keys, rows = [], []
        for k, r in runner.call("posterior", self.params_, starts, None):
            keys.extend(k)
            rows.extend(r)
        if directory:
            result = stack_posterior(rows, self.params_, self.sparse_emissions)
            result["sequence"] = list(keys)
            return result
        ordered = [None] * len(rows)
        for k, r in zip(keys, rows):
            ordered[int(k)] = r
        return stack_posterior(ordered, self.params_, self.sparse_emissions)

    def predict_next_proba(self, sequences) -> np.ndarray:
        """Posterior predictive distribution of the next symbol of each sequence.

        For a sequence ``x_1..x_n`` (the whole of it is the observed prefix), after the
        held-out E-step of :meth:`score_samples` on it::

            p(x_(n+1) = v | x_1..x_n) = sum_(i,j) q(z_n = i) E_q[A_m][i, j] E_q[B_m][j, v]

        with ``q(z_n)`` the last state marginal and ``E_q`` the means of the sequence's own
        posterior ``q(theta_m)`` (per-sequence groups), of the shared posterior (shared groups)
        or the point estimate (point groups). Under the mean-field ``q`` this is the
        variational posterior predictive (docs/math.md, "Next-event prediction and decoding").

        Parameters
        ----------
        sequences : list of 1-D integer arrays, each with at least one symbol

        Returns
        -------
        np.ndarray, shape (M, V), float64, in the input order; rows sum to 1.
        """
        seqs = self._validate_for_score(sequences)
        self._require_possible(seqs)
        buckets, states = self._e_step(seqs)
        out = np.empty((len(seqs), self.n_symbols_))
        for b, st in zip(buckets, states):
            means = posterior_means(self.params_, b, st)
            marg = state_marginals(self.guide, self.params_, b, st).double()
            rows = torch.arange(b.n_sequences)
            last = marg[rows, b.lengths.long() - 1]  # q(z_n), (M_b, K)
            w = torch.einsum("mi,mij->mj", last, means["A"].expand(b.n_sequences, -1, -1))
            if b.sparse and self.sharing.kind("B") == SEQUENCE:
                p = predictive_emissions(w, self.params_.prior["B"], st.counts["B"], b)
            elif means["B"].shape[0] == 1:
                p = w @ means["B"][0]
            else:
                p = torch.einsum("mj,mjv->mv", w, means["B"])
            out[b.index.numpy()] = (p / p.sum(-1, keepdim=True)).numpy()
        return out

    def decode(self, sequences) -> list:
        """Most probable hidden-state path of each sequence under its posterior-mean parameters.

        After the held-out E-step, Viterbi (:func:`ldhmm.inference.viterbi_log`) on the chain
        with ``E_q[pi_m]``, ``E_q[A_m]``, ``E_q[B_m]`` (the sequence's own posterior means for
        per-sequence groups; shared posterior means and point estimates otherwise).

        Parameters
        ----------
        sequences : list of 1-D integer arrays

        Returns
        -------
        list of np.ndarray, each of shape (N_m,) and dtype int64 (states in 0..K-1), in the
        input order.
        """
        seqs = self._validate_for_score(sequences)
        self._require_possible(seqs)
        buckets, states = self._e_step(seqs)
        out = [None] * len(seqs)
        for b, st in zip(buckets, states):
            # a point estimate's exact zero is a potential of -inf (the path avoids it)
            logs = {g: torch.log(v) for g, v in posterior_means(self.params_, b, st).items()}
            log_obs = emission_potentials(logs["B"], emission_index(self.params_, b))
            paths = viterbi_log(logs["pi"], logs["A"], log_obs, b.mask)
            for i, path in zip(b.index.tolist(), unpad_paths(paths)):
                out[i] = path
        return out

    def log_marginal_is(
        self,
        sequences,
        n_samples: int = 100,
        seed: int = 0,
        backend: str = "local",
        client=None,
        n_partitions=None,
        out=None,
    ) -> np.ndarray:
        """Importance-sampled estimate of ``log p(x_m)`` per sequence (docs/math.md, held-out scoring).

        The proposal is the fitted ``q(theta_m)``; ``log p(x | theta_s)`` is exact (forward
        algorithm). Its expectation is a lower bound on ``log p(x)`` that tightens with
        ``n_samples`` and is at least the ELBO on average. Point-estimate groups enter at their
        value; shared groups (VBHMM) are sampled from their posterior, which makes the estimate
        one of the predictive ``log p(x | training data)``.

        Parameters
        ----------
        sequences : list of 1-D integer arrays; with ``backend="dask"`` or ``n_partitions``
            also a directory written by :func:`ldhmm.data.write_partitioned`
        n_samples : int
        seed : int
            Seeds the draws; partition ``p`` of a partitioned run draws from
            ``SeedSequence([seed, p])`` for ``p >= 1`` (partition 0 from ``seed``, so one
            partition is the in-process estimate). Estimates depend on the partitioning, not
            on the number of workers.
        backend, client, n_partitions : as in :meth:`fit`
        out : str, optional
            A directory: each partition writes ``out/part-<i>.parquet`` (columns ``sequence``,
            ``log_marginal``) where it runs; the list of paths is returned.

        Returns
        -------
        np.ndarray, shape (M,) (a pandas Series indexed by id for a directory input), or the
        list of Parquet paths written with ``out``.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        if backend != "local" or n_partitions is not None or out is not None:
            return self._is_partitioned(
                sequences, int(n_samples), int(seed), backend, client, n_partitions, out
            )
        seqs = self._validate_for_score(sequences)
        self._require_possible(seqs)
        L = max((len(x) for x in seqs), default=0)
        check_memory(
            importance_sampling_bytes(
                self.n_states,
                self.n_symbols_,
                len(seqs),
                L,
                n_samples,
                self.bucket_cells,
                self.sparse_emissions,
                LOCAL_CHUNK,
            ),
            f"importance sampling ({n_samples} samples) with K = {self.n_states} states, "
            f"V = {self.n_symbols_} symbols",
            "fewer samples (n_samples / --is-samples) or a smaller bucket_cells",
        )
        buckets, states = self._e_step(seqs)
        with torch.random.fork_rng():
            torch.manual_seed(int(seed))
            values = log_marginal_is(self.params_, buckets, states, n_samples, self.bucket_cells)
        out = np.empty(len(seqs))
        for b, v in zip(buckets, values):
            out[b.index.numpy()] = v
        return out

    def _is_partitioned(self, data, n_samples, seed, backend, client, n_partitions, out):
        runner, directory = self._scoring_runner(data, backend, client, n_partitions)
        starts = default_starts(self.guide, self.random_starts)
        seeds = partition_seeds(seed, runner.n_partitions)
        if out is not None:
            args = [(self.params_, starts, n_samples, s, p) for s, p in zip(seeds, _part_paths(out, runner))]
            return runner.call_each("log_marginal_is", args)
        results = runner.call_each(
            "log_marginal_is", [(self.params_, starts, n_samples, s, None) for s in seeds]
        )
        return self._collect(results, directory, "log_marginal")

    # ---- persistence ---------------------------------------------------------------------
    def get_config(self) -> dict:
        """The settings a model file records (see :meth:`SequenceModel.get_config`).

        A guide is recorded by its name (``"pf"``, ``"ff"``; a user-written guide by its
        ``name`` or ``"custom"``): guides are code, and a model file is never executable.
        """
        config = super().get_config()
        config["guide"] = getattr(self.guide, "name", "custom")
        return config

    def save(self, path, vocabulary=None) -> None:
        """Write the fitted model as JSON (written to a temporary file, then renamed into place).

        Format (version 2)::

            {"format": "ldhmm", "version": 2, "class": "LDHMM", "config": {...},
             "sharing": {"pi": ..., "A": ..., "B": ..., "learn_prior": ..., "pseudocount": ...},
             "prior": {"pi": [...], "A": [[...]], "B": [[...]]},      # Dirichlet concentrations
             "posterior": {...},                                     # shared groups
             "log_point": {...},                                     # point groups, log-probs
             "elbo_history": [...],
             "vocabulary": ["symbol 0", ...] or null}                 # V names (version 2)

        Arrays are nested lists of float64 (exact round trip). An array of at least
        ``NPZ_MIN_ENTRIES`` (65,536) entries (B at large vocabularies) is written instead to the
        NPZ side file ``<name>.<digest>.npz`` beside the model, and the JSON holds
        ``{"npz": "prior.B"}`` for it and ``"arrays": "<name>.<digest>.npz"`` (see
        :mod:`ldhmm.models.file_format`); copy both files together. Replacing a model file
        removes the side file the old one named once the new one is in place. Version 1 files (no
        ``vocabulary``) still load.

        Parameters
        ----------
        path : str or Path
        vocabulary : sequence of str, optional
            The names of the V training symbols (default: ``vocabulary_`` when set), so that a
            log is mapped into the model's codes by name at score time.
        """
        self._check_fitted()
        if vocabulary is None:
            vocabulary = getattr(self, "vocabulary_", None)
        if vocabulary is not None:
            vocabulary = [str(v) for v in vocabulary]
            if len(vocabulary) != self.n_symbols_ or len(set(vocabulary)) != len(vocabulary):
                raise ValueError(
                    f"vocabulary: expected {self.n_symbols_} distinct symbol names, got {len(vocabulary)}"
                )
        path = Path(path)
        side = {}  # large arrays: to the NPZ side file

        def arrays(section: str, tensors: dict) -> dict:
            out = {}
            for g, t in tensors.items():
                values = t.detach().double().cpu().numpy()
                if values.size >= NPZ_MIN_ENTRIES:
                    side[f"{section}.{g}"] = values
                    out[g] = {"npz": f"{section}.{g}"}
                else:
                    out[g] = values.tolist()
            return out

        doc = {
            "format": "ldhmm",
            "version": FORMAT_VERSION,
            "class": type(self).__name__,
            "config": self.get_config(),
            "sharing": self.sharing.to_dict(),
            "prior": arrays("prior", self.params_.prior),
            "posterior": arrays("posterior", self.params_.posterior),
            "log_point": arrays("log_point", self.params_.log_point),
            "elbo_history": [float(x) for x in getattr(self, "elbo_history_", [])],
            "vocabulary": vocabulary,
        }
        previous = named_side_file(path)  # of a model file being replaced
        if side:
            # The side file first, under a name of its own (a digest of its arrays): the JSON
            # that names it appears only once it is complete, and until then the old JSON still
            # names the old side file.
            doc["arrays"] = side_file_name(path, side)
            _write_atomically(path.parent / doc["arrays"], lambda f: np.savez(f, **side), binary=True)
        _write_atomically(path, lambda f: f.write(json.dumps(doc, allow_nan=True)))
        if previous is not None and previous.name != doc.get("arrays") and previous.is_file():
            previous.unlink()  # no model file names it any more

    @classmethod
    def load(cls, path, guide=None):
        """Read a model written by :meth:`save` (format versions 1 and 2).

        Every field is checked against the schema of :mod:`ldhmm.models.file_format` (types,
        ranges, shapes, finiteness, signs, vocabulary) before anything is built.

        Parameters
        ----------
        path : str or Path
        guide : guide object, optional
            Needed when the model was fitted with a custom guide (saved as its name only).

        Raises
        ------
        ValueError
            One line naming the file and the field (:class:`ModelFileError`) for a file that
            does not follow the schema, is not JSON, or is of a newer format version.
        """
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not an ldhmm model file ({exc})") from None
        validate_model_document(doc, path)
        config = dict(doc["config"])
        check_config_types(path, cls, config)
        saved_guide = config.pop("guide", "pf")
        if guide is None:
            if saved_guide not in ("pf", "ff"):
                raise ModelFileError(
                    path, "config.guide", f"custom guide {saved_guide!r}; pass guide= to load it"
                )
            guide = saved_guide
        try:
            sharing = ParameterSharing(**doc["sharing"])
            model = cls._from_config(config, sharing, guide)
        except (TypeError, ValueError) as err:
            raise ModelFileError(path, "config", " ".join(str(err).split())) from None
        if model.sharing != sharing:
            raise ModelFileError(
                path, "sharing", f"{doc['sharing']} is not the sharing of class {type(model).__name__}"
            )
        dtype = _DTYPES[model.dtype]
        params = VariantParameters(
            sharing,
            {k: torch.as_tensor(np.asarray(v, dtype=np.float64)).to(dtype) for k, v in doc["prior"].items()},
            {
                k: torch.as_tensor(np.asarray(v, dtype=np.float64)).to(dtype)
                for k, v in doc["posterior"].items()
            },
            {
                k: torch.as_tensor(np.asarray(v, dtype=np.float64)).to(dtype)
                for k, v in doc["log_point"].items()
            },
        )
        model._set_params(params)
        model.elbo_history_ = np.asarray(doc.get("elbo_history", []), dtype=np.float64)
        model.n_iter_ = len(model.elbo_history_)
        if doc.get("vocabulary") is not None:
            model.vocabulary_ = list(doc["vocabulary"])
        return model

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(sharing=sharing, guide=guide, **config)


def _part_paths(out, runner) -> list[str]:
    """``out/part-<i>.parquet`` for each partition of ``runner`` (absolute: workers write them).
    A directory that already holds part files is refused: mixed with this run's they would be
    read back as one result (and nothing already written is overwritten)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    stale = sorted(Path(out).glob("part-*.parquet"))
    if stale:
        raise ValueError(
            f"out={str(out)!r} already holds {len(stale)} part-*.parquet files ({stale[0].name}, ...): "
            f"remove them or choose another directory"
        )
    return [str(Path(out).resolve() / f"part-{i:05d}.parquet") for i in range(runner.n_partitions)]


def _write_atomically(path: Path, write, binary: bool = False) -> None:
    """``write(file)`` into a temporary file beside ``path``, then rename it into place: an
    existing file is replaced whole or not at all."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
