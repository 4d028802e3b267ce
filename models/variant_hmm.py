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

import hashlib
import importlib
import json
import os
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import balanced_partitions, plan_partitions, read_manifest
from ..data.fingerprint import training_record
from ..data.seeds import derived_seeds
from ..inference import (
    FitResult,
    ParameterSharing,
    PFGuide,
    VariantParameters,
    VariationalEM,
    guide_starts,
    held_out_starts,
    hmm_started_parameters,
    init_parameters,
    make_buckets,
    resolve_guide,
    symbol_seeded_parameters,
)
from ..inference.batch import bucket_cells
from ..inference.cavi.emissions import LOCAL_CHUNK
from ..inference.cavi.emissions import emission_layout as layout_of
from ..inference.cavi.posterior import stack_posterior
from ..inference.cavi.support import ImpossibleSequenceError, impossible_reason, supports
from ..inference.checkpoint import FitCheckpoint
from ..inference.distributed.workers import LocalBackend, PartitionWorker
from ..inference.em import NonFiniteELBOError
from ..inference.ops.importance import ImportanceEstimate
from ..inference.sharing import POINT
from .base import SequenceModel, check_n_symbols, data_source
from .description import ModelDescription, describe_model
from .file_format import FORMAT_VERSION, read_model_file, write_model_file
from .fit_settings import DTYPES as _DTYPES
from .fit_settings import TakesFitSettings
from .memory import check_memory, fit_bytes, importance_sampling_bytes, posterior_bytes, score_bytes
from .path import continue_grown, continue_previous, fit_path

__all__ = ["VariantHMM", "FORMAT_VERSION"]

#: Where a fit's partitions live (see :meth:`VariantHMM.fit`).
BACKENDS = ("local", "dask")
#: The database-level HMM that ``start_policy="hmm"`` fits first: every group a point estimate,
#: MAP with the HMM baseline's pseudocount (no probability of exactly 0, which no Dirichlet
#: prior could start from).
START_HMM_SHARING = ParameterSharing(pi=POINT, A=POINT, B=POINT, learn_prior=False, pseudocount=1e-2)
#: The database-level HMM's relative tolerance at most: from a random start Baum-Welch first
#: crawls along a plateau, where the fit's 1e-4 stopped it after two iterations (Entree K = 8:
#: LDHMM-FF's median over 5 seeds 0.0023 nats/token below v4 with 1e-4, 0.0009 with 1e-5).
START_HMM_TOL = 1e-5


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

    @property
    def score_family(self) -> str:
        """The variational family of the held-out bound: the guide's family of q(Z) (``"PF"``,
        ``"FF"``, a guide's own ``score_family`` or ``name``), and, for a sharing other than
        LDHMM's, which of pi, A, B are per sequence, shared or point estimates (their q(theta)
        differs, and so does the bound's gap). Bounds are compared only within one family
        (:mod:`ldhmm.experiments.measures`)."""
        guide = getattr(self.guide, "score_family", None) or getattr(self.guide, "name", "custom")
        guide = {"pf": "PF", "ff": "FF"}.get(guide, guide)
        s = self.sharing
        if (s.pi, s.A, s.B) == ("sequence", "sequence", "sequence"):
            return guide
        return f"{guide}; pi {s.pi}, A {s.A}, B {s.B}"

    # ---- helpers -------------------------------------------------------------------------
    @property
    def _torch_dtype(self):
        return _DTYPES[self.dtype]

    def _engine(self, progress=False, guide=None, checkpoint=None) -> VariationalEM:
        return VariationalEM(
            self.guide if guide is None else guide,
            progress=progress,
            checkpoint=checkpoint,
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
        grown: tuple = (),
        checkpoint=None,
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
        grown : ldhmm.models.path.GrownStarts, optional
            Starting points beside the restarts (what :meth:`fit_path` grows from the fit with
            fewer states), raced after them (:func:`ldhmm.models.path.continue_grown`); the run
            with the highest final training ELBO is kept and ``start_kind_`` names it. Not with
            ``init_params``.
        checkpoint : str or Path, optional
            A directory: the fit's state (every run's parameters, ELBO history and stopping
            rule; :mod:`ldhmm.inference.checkpoint`) is written there atomically after every EM
            iteration, and a fit with the same settings and data on a directory that holds one
            resumes where it stopped, to the numbers of an uninterrupted fit. Not with ``grown``.

        Returns
        -------
        self
        """
        if init_params is not None and grown:
            raise ValueError("fit: give init_params or grown starts, not both")
        if checkpoint is not None and grown:
            raise ValueError(
                "fit: checkpoint= does not resume grown starts (fit_path); give one or the other"
            )
        if backend == "local" and n_partitions is None and not isinstance(sequences, (str, os.PathLike)):
            return super().fit(sequences, init_params=init_params, grown=grown, checkpoint=checkpoint)
        self._fit_partitioned(sequences, backend, client, n_partitions, init_params, grown, checkpoint)
        return self

    @classmethod
    def fit_path(cls, sequences, states, *, previous=None, callback=None, **options) -> dict:
        """Fit a model at every K of ``states``, each K after the first grown from the fit before it.

        The first K is fitted as :meth:`fit` fits it (its ``n_init`` restarts). Every later K
        fits its restarts (``n_init``, or ``path_n_init`` where given), the symbol-seeded start
        and, beside them, starts grown from the previous K's fit by splitting one of
        its states in two (:func:`ldhmm.inference.growth.split_state`), each probed by one EM
        iteration, the best run to convergence, the next ones only while the path would fall
        (:func:`ldhmm.models.path.continue_grown`: together about one restart); the run with the
        highest final training ELBO is kept. docs/math.md, "Growing K by splitting a state".

        Parameters
        ----------
        sequences : list of 1-D integer arrays, or a SequenceDatabase
            The training data, in this process.
        states : iterable of int
            Strictly increasing K values, e.g. ``range(2, 7)``; gaps are grown over by splitting
            more than once.
        previous : fitted model of this class, optional
            A fit with fewer states than ``states[0]`` (e.g. ``states[0] - 1``) to grow the first
            K from, to resume a path: the models are the ones the uninterrupted path gives.
        callback : callable, optional
            ``callback(K, model)`` after each K is fitted (to save it, and resume later).
        **options
            Constructor arguments of every model (``n_symbols``, ``seed``, ``n_init``,
            ``path_n_init``, ``guide``, ...). The split perturbations are seeded from ``seed``,
            K and the state (:func:`ldhmm.models.path.split_seed`): results are reproducible.

        Returns
        -------
        dict {K: fitted model}, in the order of ``states``; each model's ``path_start_`` (and
        ``start_kind_``) says how its kept run started: ``"restart"`` or ``"split:k"`` (state
        ``k`` of the previous fit split).
        """
        return fit_path(cls, sequences, states, previous=previous, callback=callback, **options)

    def _fit_partitioned(
        self, data, backend: str, client, n_partitions, init_params, grown=(), checkpoint=None
    ):
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
        self._check_partitions_memory(self._process_sizes(partitions, backend), backend)
        runner = self._runner(backend, client, partitions)
        counts = np.sum(runner.call("symbol_counts"), axis=0)
        self.n_partitions_ = runner.n_partitions
        content = None
        if checkpoint is not None and not directory:
            content = training_record(_in_given_order(partitions), "")["sha256"]
        try:
            self._fit_on(runner, counts, init_params, grown, checkpoint, content)
        except NonFiniteELBOError as err:
            self._set_params(err.last_params)
            self._set_convergence(err.convergence)
            raise
        if isinstance(vocabulary, list) and len(vocabulary) == self.n_symbols_:
            self.vocabulary_ = list(vocabulary)
        if directory:  # its tokens never pass through this process: sizes from its manifest, no hash
            self.training_data_ = {
                "source": str(data),
                "n_sequences": int(manifest["n_sequences"]),
                "n_tokens": int(manifest["n_tokens"]),
                "sha256": None,
            }
        else:
            self.training_data_ = training_record(_in_given_order(partitions), data_source(data))

    def _check_memory(self, seqs, doing: str, knob: str, estimate=fit_bytes) -> None:
        """Refuse before allocating when the estimate exceeds the memory limit (models/memory.py)."""
        self._check_sizes([_sizes_of(seqs, self.bucket_cells)], doing, knob, estimate)

    def _check_sizes(self, sizes: list, doing: str, knob: str, estimate=fit_bytes) -> None:
        """:meth:`_check_memory` of each process's share: ``sizes`` holds (M, T, L, largest
        bucket or None, partitions in the process) per process."""
        K, V = self.n_states, self.n_symbols_
        for i, (M, T, L, largest, together, _) in enumerate(sizes):
            where = f"partition {i} of {len(sizes)}: " if len(sizes) > 1 else ""
            check_memory(
                estimate(K, V, M, T, L, self.bucket_cells, self.sparse_emissions, largest, together),
                f"{doing} {where}K = {K} states, V = {V} symbols on {M} sequences ({T} tokens)",
                knob,
            )

    def _process_sizes(self, partitions: list, backend: str) -> list:
        """(M, T, L, largest bucket or None, partitions, shortest) of the sequences each process
        holds: each
        partition on its own where each lives in a worker of its own (Dask), all of them together
        in this process (``"local"``). A directory's partition is known by its counts only: its longest
        sequence is bounded by its tokens, its largest bucket by ``bucket_cells``."""
        sizes = []
        for part in partitions:
            if isinstance(part, tuple):
                sizes.append(_sizes_of(part[0], self.bucket_cells))
            else:
                sizes.append((int(part.n_sequences), int(part.n_tokens), int(part.n_tokens), None, 1, 1))
        if backend != "dask" and len(sizes) > 1:
            largest = [s[3] for s in sizes]
            M, T = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
            bucket = None if None in largest else tuple(map(max, zip(*largest)))
            sizes = [(M, T, max(s[2] for s in sizes), bucket, len(sizes), min(s[5] for s in sizes))]
        return sizes

    def _check_partitions_memory(self, sizes: list, backend: str, doing="fitting", estimate=fit_bytes):
        """The memory check (:meth:`_check_memory`) on a partitioned path, of each process's
        sequences (``sizes``: :meth:`_process_sizes`)."""
        self._check_sizes(
            sizes,
            doing,
            "more partitions (n_partitions / --partitions), fewer states"
            if backend == "dask"
            else "fewer states (n_states / --states) or fewer sequences",
            estimate,
        )

    def _fit(
        self,
        seqs,
        n_symbols,
        init_params: VariantParameters | None = None,
        grown: tuple = (),
        checkpoint=None,
    ):
        kept = getattr(grown, "previous_states", None) is not None  # the K - 1 fit's state, held
        estimate = partial(fit_bytes, path_states=self.n_states - 1) if kept else fit_bytes
        self._check_memory(seqs, "fitting", "fewer states (n_states / --states) or fewer sequences", estimate)
        try:
            self._fit_em(seqs, init_params, grown, checkpoint)
        except NonFiniteELBOError as err:
            # Stop, and keep the last finite parameters: the model stays usable for scoring.
            self._set_params(err.last_params)
            self._set_convergence(err.convergence)
            raise

    def _fit_em(self, seqs, init_params: VariantParameters | None, grown: tuple = (), checkpoint=None):
        # In process: the driver over one partition holding every bucket.
        engine = self._engine(progress=self.verbose)
        runner = LocalBackend([engine.worker(self._buckets(seqs), self.n_symbols_)])
        counts = np.bincount(np.concatenate(seqs), minlength=self.n_symbols_)
        content = training_record(seqs, "")["sha256"] if checkpoint is not None else None
        self._fit_on(runner, counts, init_params, grown, checkpoint, content)

    def _fit_on(
        self,
        runner,
        symbol_counts,
        init_params: VariantParameters | None,
        grown: tuple = (),
        checkpoint=None,
        content: str | None = None,
    ):
        """Restarts and initialization (docs/math.md) over a backend's partitions; ``grown``:
        further starts raced after the restarts (:meth:`_best_start`); ``checkpoint``: a
        directory the fit is checkpointed in and resumed from (:mod:`ldhmm.inference.checkpoint`),
        which must hold a fit of the data whose coded sequences hash to ``content`` (SHA-256,
        :func:`ldhmm.data.fingerprint.training_record`; None where the tokens never pass through
        this process)."""
        if init_params is not None:
            _check_start(init_params, self.n_states, len(symbol_counts), self.sharing)
        store = None
        if checkpoint is not None:
            fingerprint = self._fingerprint(symbol_counts, runner, init_params)
            fingerprint["data_sha256"] = content
            store = FitCheckpoint(checkpoint, fingerprint, self.sharing)
        engine = self._engine(progress=self.verbose, checkpoint=store)
        self.init_elbo_history_ = np.asarray([])
        self.restart_elbo_histories_, self.kept_restart_ = [], None  # no restarts: a given start
        if init_params is not None:
            result = engine.fit_backend(runner, init_params, label="from the given start")
            self.start_kind_ = "init"
        elif self._init_method() == "pf":
            # The PF fit (with the restarts) first, then this guide from its parameters.
            chain, self.start_kind_ = self._best_start(
                self._engine(progress=self.verbose, guide=PFGuide(), checkpoint=store),
                runner,
                symbol_counts,
                grown,
            )
            self.init_elbo_history_ = np.asarray(chain.elbo_history)
            result = engine.fit_backend(
                runner, chain.params, label=f"{getattr(self.guide, 'name', 'guide')} from the PF fit"
            )
        else:
            result, self.start_kind_ = self._best_start(engine, runner, symbol_counts, grown)
        if grown and result.elbo_history[-1] <= grown.floor:
            # every run ends at or below the fit it was grown from: continue that fit
            continued = continue_previous(engine, runner, grown)
            if continued is not None and continued.elbo_history[-1] > result.elbo_history[-1]:
                result, self.start_kind_, self.kept_restart_ = continued, "continued", None
                self.init_elbo_history_ = np.asarray([])  # it started from no PF fit
        # a path's next K continues from this run (in process: its partition's state)
        self._path_states = (
            [result.states] if getattr(grown, "keep_states", False) and result.states is not None else None
        )
        self.recoveries_ = list(result.recoveries)
        self._set_params(result.params)
        self.elbo_history_ = np.asarray(result.elbo_history)
        self.e_step_elbo_history_ = np.asarray(result.e_step_elbo_history)
        self.elbo_trace_ = list(result.trace)
        self._set_convergence(result.convergence)
        self.prior_capped_ = result.capped

    def _fingerprint(self, symbol_counts, runner, init_params) -> dict:
        """What a checkpoint must match to be resumed: the settings (not ``verbose``), the data's
        symbol counts, the partitions, and the starting point given."""
        config = {k: v for k, v in self.get_config().items() if k != "verbose"}
        start = None
        if init_params is not None:
            start = [
                zlib.crc32(np.ascontiguousarray(t.detach().cpu().numpy()).tobytes())
                for d in ("prior", "posterior", "log_point")
                for _, t in sorted(getattr(init_params, d).items())
            ]
        return {
            "class": type(self).__name__,
            # objects (a guide given as an object) by their class: a repr may hold an address
            "config": json.loads(json.dumps(config, default=lambda o: type(o).__qualname__)),
            "symbol_counts": hashlib.sha256(np.asarray(symbol_counts, dtype=np.int64).tobytes()).hexdigest(),
            "partitions": [list(map(int, size)) for size in runner.call("size")],
            "init_params": start,
        }

    def restart_seeds(self) -> list[int]:
        """The seeds of the restarts: ``seed`` itself, then seeds derived from ``(seed, r)`` (so
        that models with neighbouring seeds share no restart; :func:`ldhmm.data.seeds.derived_seeds`).

        ``n_init`` of them, or as many as the fit ran where it recorded its restarts (a path's K
        after the first runs ``min(n_init, path_n_init)``: the first of these seeds)."""
        ran = getattr(self, "restart_elbo_histories_", None)
        return derived_seeds(self.seed, len(ran) if ran else self.n_init)

    def _n_restarts(self, grown) -> int:
        """How many restarts a fit runs: ``n_init``, or ``min(n_init, path_n_init)`` where
        ``grown`` starts race beside them (a path's K after the first) and ``path_n_init`` is set."""
        if not grown or self.path_n_init is None:
            return self.n_init
        return min(self.n_init, self.path_n_init)

    def _init_method(self) -> str:
        if self.init != "auto":
            return self.init
        return "pf" if "chain" in guide_starts(self.guide) else "random"

    def _best_of_restarts(
        self, engine: VariationalEM, runner, symbol_counts, n_restarts: int
    ) -> tuple[FitResult, str]:
        """``n_restarts`` restarts (the first seeds of :meth:`restart_seeds`), then the
        symbol-seeded start where ``seeded_start`` asks for it
        (:func:`ldhmm.inference.parameters.symbol_seeded_parameters`): the run with the highest
        final ELBO (the earlier run on a tie) and how it started (``"restart"`` or ``"seeded"``)."""
        policy = self.fit_settings.resolved().start_policy
        if policy != "restarts":
            return self._from_database_hmm(engine, runner, symbol_counts, n_restarts, policy)
        result, kind = None, "restart"
        seeds = derived_seeds(self.seed, n_restarts)
        self.restart_elbo_histories_ = []
        for r, seed in enumerate(seeds):
            label = f"restart {r + 1} of {len(seeds)}" if len(seeds) > 1 else ""
            run = engine.fit_backend(runner, self._initial_from_counts(symbol_counts, seed=seed), label=label)
            self.restart_elbo_histories_.append(np.asarray(run.elbo_history, dtype=np.float64))
            if result is None or run.elbo_history[-1] > result.elbo_history[-1]:
                result, self.kept_restart_ = run, r
        start = self._seeded_start(symbol_counts)
        if start is not None:
            run = engine.fit_backend(runner, start, label="symbol-seeded start")
            if run.elbo_history[-1] > result.elbo_history[-1]:
                result, kind, self.kept_restart_ = run, "seeded", None
        return result, kind

    def _from_database_hmm(
        self, engine: VariationalEM, runner, symbol_counts, n_restarts: int, policy: str
    ) -> tuple[FitResult, str]:
        """``start_policy`` ``"hmm"`` or ``"hmm_and_seeded"``
        (:class:`ldhmm.models.fit_settings.FitSettings`): the database-level HMM
        (:meth:`database_hmm`), one EM run of this model from it
        (:func:`ldhmm.inference.hmm_started_parameters`) and, for ``"hmm_and_seeded"``, one from
        the symbol-seeded start: the run with the higher final ELBO (the HMM's on a tie) and how
        it started (``"hmm"`` or ``"seeded"``)."""
        self.restart_elbo_histories_, self.kept_restart_ = [], None
        hmm = self.database_hmm(runner, symbol_counts, n_restarts)
        start = hmm_started_parameters(
            self.sharing,
            hmm.params,
            prior_concentration=self.prior_concentration,
            n_tokens=float(np.sum(symbol_counts)),
        )
        result, kind = engine.fit_backend(runner, start, label="from the database-level HMM"), "hmm"
        seeded = self._seeded_start(symbol_counts) if policy == "hmm_and_seeded" else None
        if seeded is not None:
            run = engine.fit_backend(runner, seeded, label="symbol-seeded start")
            if run.elbo_history[-1] > result.elbo_history[-1]:
                result, kind = run, "seeded"
        return result, kind

    def database_hmm(
        self, runner, symbol_counts, n_restarts: int, tol: float | None = None, max_iter: int | None = None
    ) -> FitResult:
        """The HMM shared by every sequence, fitted by EM (Baum-Welch, MAP with pseudocount
        0.01: :data:`START_HMM_SHARING`) on ``runner``'s partitions from ``n_restarts`` random
        starts (:meth:`restart_seeds`) and the symbol-seeded one (``seeded_start``), to this
        model's ``tol`` (at most :data:`START_HMM_TOL`) and ``max_iter`` (or ``tol``, ``max_iter``
        given): the run with the highest final objective (the earlier on a tie). Its E-step is
        exact in one sweep (no per-sequence parameters). Its objective per run is kept in
        ``hmm_objective_histories_``."""
        engine = VariationalEM(
            PFGuide(),
            max_iter=self.max_iter if max_iter is None else max_iter,
            tol=min(self.tol, START_HMM_TOL) if tol is None else tol,
            e_step_max_iter=1,
            e_step_tol=self.e_step_tol,
            progress=self.verbose,
            refresh_max=0,
            random_starts=0,
        )
        freq = np.asarray(symbol_counts, dtype=np.float64)
        starts = [
            init_parameters(
                START_HMM_SHARING,
                self.n_states,
                self.n_symbols_,
                symbol_frequencies=freq / freq.sum(),
                seed=seed,
                n_tokens=float(freq.sum()),
                dtype=self._torch_dtype,
            )
            for seed in derived_seeds(self.seed, n_restarts)
        ]
        seeded = self._seeded_start(symbol_counts, START_HMM_SHARING)
        starts += [seeded] if seeded is not None else []
        best, self.hmm_objective_histories_ = None, []
        for r, start in enumerate(starts):
            run = engine.fit_backend(
                runner, start, label=f"database-level HMM, start {r + 1} of {len(starts)}"
            )
            self.hmm_objective_histories_.append(np.asarray(run.elbo_history, dtype=np.float64))
            if best is None or run.elbo_history[-1] > best.elbo_history[-1]:
                best = run
        return best

    def _seeded_start(
        self, symbol_counts, sharing: ParameterSharing | None = None
    ) -> VariantParameters | None:
        """The symbol-seeded start of this fit (of the variant ``sharing``, default this model's),
        or None (``seeded_start="none"``, or fewer than K distinct symbols in the data)."""
        if self.seeded_start == "none":
            return None
        return symbol_seeded_parameters(
            self.sharing if sharing is None else sharing,
            self.n_states,
            symbol_counts,
            prior_concentration=self.prior_concentration,
            dtype=self._torch_dtype,
        )

    def _best_start(self, engine: VariationalEM, runner, symbol_counts, grown=()) -> tuple[FitResult, str]:
        """The restarts and the symbol-seeded start (:meth:`_best_of_restarts`), then the
        ``grown`` starts (:class:`ldhmm.models.path.GrownStarts`, raced by
        :func:`ldhmm.models.path.continue_grown`): the run with the highest final ELBO and how
        it started (``"restart"``, ``"seeded"`` or the grown start's label)."""
        result, kind = self._best_of_restarts(engine, runner, symbol_counts, self._n_restarts(grown))
        if not grown:
            return result, kind
        result, grown_kind = continue_grown(engine, runner, grown, result)
        if grown_kind != "restart":  # a grown start won: no restart was kept
            self.kept_restart_, kind = None, grown_kind
        return result, kind

    # ---- partitions ----------------------------------------------------------------------
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

    # ---- scoring -------------------------------------------------------------------------
    def _held_out(
        self,
        method: str,
        data,
        backend: str = "local",
        client=None,
        n_partitions=None,
        out=None,
        args: tuple = (),
        seed: int | None = None,
        memory_check=None,
    ):
        """The held-out E-step of ``data`` where its partitions live, then the workers'
        ``method`` (:class:`ldhmm.inference.distributed.workers.PartitionWorker`'s ``score``,
        ``posterior``, ``log_marginal_is``, ``predict_next_proba``, ``decode``) with
        ``(params_, starts, *args[, seed][, out_path])``.

        Sequences in this process are one partition (:class:`LocalBackend`) unless
        ``n_partitions`` says otherwise. Refused before anything is allocated when an estimate
        of a process's share (:meth:`_process_sizes`) exceeds the memory limit
        (``memory_check(M, L, shortest)`` first, then the E-step's), on every path. ``seed``: partition p
        draws from ``derived_seeds(seed, P)[p]``.

        Returns
        -------
        (results in partition order, directory), or the Parquet paths written with ``out``.
        """
        self._check_fitted()
        partitions, directory = self._partitions(
            data, backend, client, n_partitions, self._validate_for_score
        )
        sizes = self._process_sizes(partitions, backend)
        for M, _, L, _, _, shortest in sizes if memory_check is not None else ():
            memory_check(M, L, shortest)
        estimate = posterior_bytes if method == "posterior" else score_bytes
        self._check_partitions_memory(sizes, backend, "scoring with", estimate)
        runner = self._runner(backend, client, partitions)
        if method not in ("score", "impossible"):  # no answer for a sequence of probability 0
            _refuse_impossible(runner.call("impossible", self.params_), directory, self.params_)
        starts = held_out_starts(self.guide, self.random_starts)
        calls = [(self.params_, starts, *args) for _ in range(runner.n_partitions)]
        if seed is not None:
            calls = [call + (s,) for call, s in zip(calls, derived_seeds(seed, runner.n_partitions))]
        if out is not None:
            return runner.call_each(method, [call + (p,) for call, p in zip(calls, _part_paths(out, runner))])
        return runner.call_each(method, calls), directory

    def score_samples(self, sequences, backend: str = "local", client=None, n_partitions=None, out=None):
        """Per-sequence held-out ELBO in nats (the paper's measure; a lower bound on log p(x)).

        A sequence the model gives probability 0 (:meth:`impossible_events`: a point-estimated
        group with -inf entries, e.g. a symbol unseen in training without pseudocount) is left
        out of the E-step and scores -inf (its log-likelihood, and every bound on it), never
        NaN.

        Parameters
        ----------
        sequences : list of 1-D integer arrays; with ``backend="dask"`` or ``n_partitions``
            also a directory written by :func:`ldhmm.data.write_partitioned`
        backend, client, n_partitions : as in :meth:`fit`
            The held-out E-step of each partition runs where the partition lives (in this
            process, one partition by default).
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
        found = self._held_out("score", sequences, backend, client, n_partitions, out)
        return found if out is not None else _by_key(*found, "elbo")

    def impossible_events(self, sequences) -> np.ndarray:
        """Where the model gives each sequence probability 0 (the one rule of every scoring
        method: :mod:`ldhmm.inference.cavi.support`): a point-estimated group with a -inf entry
        can forbid a symbol in every state, or a symbol after another.

        Parameters
        ----------
        sequences : list of 1-D integer arrays

        Returns
        -------
        np.ndarray, shape (M, 2), int64, in the input order: the 0-based position of the first
        event no state path reaches and its symbol, or (-1, -1) for a sequence the model can
        score. :meth:`score_samples` gives such a sequence -inf; :meth:`posterior`,
        :meth:`predict_next_proba`, :meth:`decode` and :meth:`log_marginal_is` raise
        :class:`ldhmm.inference.cavi.support.ImpossibleSequenceError` (a ``ValueError``)
        naming the first one.
        """
        results, _ = self._held_out("impossible", sequences)
        if not results:
            return np.empty((0, 2), dtype=np.int64)
        return _by_key(results, False).astype(np.int64)

    def _score_samples(self, seqs):
        return self.score_samples(seqs)

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

        Raises
        ------
        ValueError
            A sequence the model gives probability 0 (see :meth:`score_samples`): it has no
            posterior.
        """
        found = self._held_out("posterior", sequences, backend, client, n_partitions, out)
        if out is not None:
            return found
        results, directory = found
        if directory:
            result = stack_posterior(
                [r for _, rows in results for r in rows], self.params_, self.sparse_emissions
            )
            result["sequence"] = [k for keys, _ in results for k in keys]
            return result
        return stack_posterior(_in_input_order(results), self.params_, self.sparse_emissions)

    def predict_next_proba(
        self, sequences, backend: str = "local", client=None, n_partitions=None
    ) -> np.ndarray:
        """Posterior predictive distribution of the next symbol of each sequence.

        For a sequence ``x_1..x_n`` (the whole of it is the observed prefix), after the
        held-out E-step of :meth:`score_samples` on it::

            p(x_(n+1) = v | x_1..x_n) = sum_(i,j) q(z_n = i) E_q[A_m][i, j] E_q[B_m][j, v]

        with ``q(z_n)`` the last state marginal and ``E_q`` the means of the sequence's own
        posterior ``q(theta_m)`` (per-sequence groups), of the shared posterior (shared groups)
        or the point estimate (point groups). Under the mean-field ``q`` this is the
        variational posterior predictive (docs/math.md, "Next-event prediction and decoding";
        :func:`ldhmm.inference.cavi.posterior.next_symbol_proba`).

        Parameters
        ----------
        sequences : list of 1-D integer arrays, each with at least one symbol
        backend, client, n_partitions : as in :meth:`fit`
            The held-out E-step of each partition runs where the partition lives (the same
            numbers whatever the partitions).

        Returns
        -------
        np.ndarray, shape (M, V), float64, in the input order; rows sum to 1.
        """
        results, _ = self._held_out(
            "predict_next_proba", _in_memory(sequences), backend, client, n_partitions
        )
        return _by_key(results, False)

    def decode(self, sequences, backend: str = "local", client=None, n_partitions=None) -> list:
        """Most probable hidden-state path of each sequence under its posterior-mean parameters.

        After the held-out E-step, Viterbi (:func:`ldhmm.inference.viterbi_log`) on the chain
        with ``E_q[pi_m]``, ``E_q[A_m]``, ``E_q[B_m]`` (the sequence's own posterior means for
        per-sequence groups; shared posterior means and point estimates otherwise;
        :func:`ldhmm.inference.cavi.posterior.viterbi_paths`).

        Parameters
        ----------
        sequences : list of 1-D integer arrays
        backend, client, n_partitions : as in :meth:`predict_next_proba`

        Returns
        -------
        list of np.ndarray, each of shape (N_m,) and dtype int64 (states in 0..K-1), in the
        input order.
        """
        results, _ = self._held_out("decode", _in_memory(sequences), backend, client, n_partitions)
        return _in_input_order(results)

    def describe(
        self, data=None, *, baseline=None, n_clusters: int = 3, n_examples: int = 2, seed: int = 0
    ) -> ModelDescription:
        """The model explained as tables (pandas DataFrames): what ``ldhmm report`` shows.

        Each state named by its most likely events (mean and spread of B), the initial and
        transition structure, the fit's history; with ``data``, the users: their per-token
        bound (typical and unusual users), groups of similar posterior dynamics (seeded
        k-means), a few decoded paths, and next-event accuracy beside ``baseline``
        (:func:`ldhmm.models.description.describe_model`, which documents every argument).

        Parameters
        ----------
        data : list of 1-D int arrays or SequenceDatabase, optional
            Users in the model's codes.
        baseline : str or model, optional
            E.g. ``"MARKOV1"`` (a registered harness name): the first-order Markov chain,
            fitted on the users' prefixes.
        n_clusters, n_examples, seed : int

        Returns
        -------
        ModelDescription
            ``.tables()``: the DataFrames by name (``summary``, ``states``, ``emissions``,
            ``initial``, ``transitions``, ``transition_spread``, ``history``; with data ``users``,
            ``clusters``, ``examples``, ``next_event``).
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
            partition, the default in this process, draws from ``seed``). Estimates depend on
            the partitioning, not on the number of workers.
        backend, client, n_partitions : as in :meth:`fit`
        out : str, optional
            A directory: each partition writes ``out/part-<i>.parquet`` (columns ``sequence``,
            ``log_marginal``) where it runs; the list of paths is returned.
        diagnostics : bool
            Return an :class:`~ldhmm.inference.ops.importance.ImportanceEstimate`: the same
            estimates (the same draws) with each one's standard error and effective sample
            size (sequences in memory, not with ``out`` or a directory).

        Returns
        -------
        np.ndarray, shape (M,) (a pandas Series indexed by id for a directory input), or the
        list of Parquet paths written with ``out``, or with ``diagnostics`` an
        ``ImportanceEstimate``.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        n_samples = int(n_samples)

        def sampling_memory(n_sequences, max_length, min_length):
            check_memory(
                importance_sampling_bytes(
                    self.n_states,
                    self.n_symbols_,
                    n_sequences,
                    max_length,
                    n_samples,
                    self.bucket_cells,
                    self.sparse_emissions,
                    LOCAL_CHUNK,
                    min_length,
                ),
                f"importance sampling ({n_samples} samples) with K = {self.n_states} states, "
                f"V = {self.n_symbols_} symbols",
                "fewer samples (n_samples / --is-samples) or a smaller bucket_cells",
            )

        if diagnostics and out is not None:
            raise ValueError("diagnostics=True returns the estimates: it does not write them (out=)")
        found = self._held_out(
            "log_marginal_is_diagnostics" if diagnostics else "log_marginal_is",
            sequences,
            backend,
            client,
            n_partitions,
            out,
            args=(n_samples,),
            seed=int(seed),
            memory_check=sampling_memory,
        )
        if out is not None:
            return found
        if not diagnostics:
            return _by_key(*found, "log_marginal")
        if found[1]:
            raise ValueError("diagnostics=True takes sequences in memory, not a partitioned directory")
        values = _by_key(*found).reshape(-1, 3)
        return ImportanceEstimate(values[:, 0], values[:, 1], values[:, 2], np.full(len(values), n_samples))

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
        """Write the fitted model as JSON (written to a temporary file, then renamed into place;
        the format: :func:`ldhmm.models.file_format.write_model_file`).

        An array of at least ``NPZ_MIN_ENTRIES`` (65,536) entries (B at large vocabularies) is
        written to an NPZ side file ``<name>.<digest>.npz`` beside the model: copy both files
        together. Replacing a model file removes the side file the old one named once the new
        one is in place.

        Parameters
        ----------
        path : str or Path
        vocabulary : sequence of str, optional
            The names of the V training symbols (default: ``vocabulary_`` when set), so that a
            log is mapped into the model's codes by name at score time.
        """
        self._check_fitted()
        write_model_file(path, self, vocabulary)

    @classmethod
    def load(cls, path, guide=None):
        """Read a model written by :meth:`save` (format versions 1 and 2;
        :func:`ldhmm.models.file_format.read_model_file`).

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
        return read_model_file(path, cls, guide)

    @classmethod
    def _from_config(cls, config, sharing, guide):
        return cls(sharing=sharing, guide=guide, **config)


def _in_given_order(partitions) -> list:
    """The sequences of in-memory partitions ((sequences, positions) pairs) back in the order
    given, for the same hash as an unpartitioned fit."""
    placed = sorted((int(i), p, k) for p, (_, at) in enumerate(partitions) for k, i in enumerate(at))
    return [partitions[p][0][k] for _, p, k in placed]


def _check_start(params: VariantParameters, n_states: int, n_symbols: int, sharing) -> None:
    """Refuse, in one line, ``init_params`` of another shape or variant than the model's."""
    if not isinstance(params, VariantParameters):
        raise TypeError(
            f"init_params must be VariantParameters (a fitted model's params_), got {type(params).__name__}"
        )
    if (params.n_states, params.n_symbols) != (n_states, n_symbols):
        raise ValueError(
            f"init_params has K = {params.n_states} states and V = {params.n_symbols} symbols; this "
            f"model has K = {n_states} (n_states) and V = {n_symbols} (n_symbols)"
        )
    theirs, ours = ([sh.kind(g) for g in ("pi", "A", "B")] for sh in (params.sharing, sharing))
    if theirs != ours:
        raise ValueError(
            f"init_params have pi, A, B {', '.join(theirs)}; this model's are {', '.join(ours)} (sharing)"
        )


def _in_memory(sequences):
    """``sequences``, refused in one line when it is a directory (whose per-sequence arrays
    would come back by id: :meth:`VariantHMM.score_samples` and :meth:`VariantHMM.posterior` read
    directories)."""
    if isinstance(sequences, (str, os.PathLike)):
        raise ValueError(f"{str(sequences)!r}: this method takes sequences in memory, not a directory")
    return sequences


def _by_key(results, directory: bool, name: str | None = None):
    """Per-partition (keys, array) pairs as one float64 array in the input order (keys are
    positions), or for a directory input a pandas Series indexed by the sequence ids."""
    keys, values = _merged(results)
    if directory:
        return pd.Series(values, index=keys, name=name)
    ordered = np.empty(values.shape)
    ordered[keys.astype(np.int64)] = values
    return ordered


def _refuse_impossible(results, directory: bool, params) -> None:
    """:class:`ImpossibleSequenceError` for the first sequence (input order; a directory's:
    partition order) that the workers' ``impossible`` found, if any."""
    for keys, events in results if directory else [_merged(results)]:
        bad = np.flatnonzero(events[:, 0] >= 0)
        if bad.size:
            row = int(bad[0] if directory else bad[np.argmin(np.asarray(keys)[bad])])
            key = keys[row].item() if isinstance(keys[row], np.generic) else keys[row]
            event, symbol = (int(v) for v in events[row])
            raise ImpossibleSequenceError(key, event, symbol, impossible_reason(supports(params), symbol))


def _merged(results) -> tuple:
    """Per-partition (keys, arrays) pairs as one pair, in partition order."""
    return np.concatenate([np.asarray(k) for k, _ in results]), np.concatenate([v for _, v in results])


def _in_input_order(results) -> list:
    """Per-partition (positions, list of values) pairs as one list in the input order."""
    ordered = [None] * sum(len(values) for _, values in results)
    for keys, values in results:
        for k, v in zip(keys, values):
            ordered[int(k)] = v
    return ordered


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


def _sizes_of(seqs, max_cells: int) -> tuple:
    """(sequences, tokens, the longest, (the largest bucket's padded cells, the most sequences
    in a bucket), one partition, the shortest) of ``seqs``."""
    lengths = [len(x) for x in seqs]
    cells, _, most = bucket_cells(lengths, max_cells)
    return len(lengths), int(sum(lengths)), max(lengths, default=0), (cells, most), 1, min(lengths, default=1)
