"""Partitions of a database and the workers that hold them: the unit the variational EM's driver
talks to, in this process or on a cluster.

A :class:`PartitionWorker` holds the buckets of some whole sequences and their per-sequence
variational state for the whole fit; the state never leaves it. Each EM iteration the driver
(:meth:`ldhmm.inference.em.VariationalEM.fit_backend`) sends the current parameters to every
partition and gets back sums over its sequences (:class:`ldhmm.inference.cavi.e_step_totals.EStepTotals`,
O(K V) numbers), and each pass of the collapsed M-step is one more such round, over every
learned prior at once (:meth:`PartitionWorker.count_sums`). The driver adds the partitions'
sums in partition order, each partition its buckets in bucket order, so a fit's numbers do not
depend on how many processes or threads ran the partitions (they do depend on the
partitioning: a different cut of the database adds the same terms in another order, see
docs/distributed.md).

:class:`LocalBackend` runs the workers in this process, one after the other; the Dask backend
(:mod:`ldhmm.inference.distributed.dask_backend`) runs the same workers as Dask actors.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ...data import PartitionSpec, read_partition
from ...data.atomic import write_atomically
from ..batch import make_buckets, validate_sequences
from ..cavi.e_step_totals import EStepTotals, e_step
from ..cavi.expectation import BucketState
from ..cavi.kernels.dirichlet_multinomial import table_sums
from ..cavi.maximization import state_count_table
from ..cavi.posterior import (
    bucket_posterior,
    log_marginal_is,
    next_symbol_proba,
    posterior_table,
    viterbi_paths,
)
from ..cavi.support import ImpossibleSequenceError, first_impossible_event, impossible_reason, supports
from ..copies import IDENTICAL_SEQUENCES, collapse_copies
from ..parameters import VariantParameters

__all__ = [
    "PartitionWorker",
    "LocalBackend",
    "reduce_totals",
    "reduce_count_sums",
    "Recovery",
    "as_numpy_params",
]


@dataclass(frozen=True)
class Recovery:
    """A partition rebuilt after its worker was lost, at ``iteration`` during the ``step`` round:
    from its data, with the calls since the restart replayed on it (the state it held before the
    loss, bit for bit; :mod:`ldhmm.inference.distributed.dask_backend`)."""

    iteration: int
    step: str
    partition: int
    error: str


class PartitionWorker:
    """The sequences of one partition, bucketed, and their variational state.

    Parameters
    ----------
    data : PartitionSpec, list of 1-D int arrays, or list of Bucket
        A partition of a directory written by :func:`ldhmm.data.write_partitioned` (read here,
        where the worker runs: the tokens never pass through the driver), sequences, or buckets
        already made.
    guide : guide object
    n_symbols : int
    sparse : bool
        The emission layout (decided by the driver from K and V).
    bucket_cells : int
    e_step_max_iter, e_step_tol : int, float
    index : ndarray of int, optional
        Positions of this partition's sequences in the database (default: 0..M-1; a
        PartitionSpec's: a hash of each sequence's id).
    identical_sequences : {"each", "once"}
        ``"once"`` (sequences or a PartitionSpec only): each distinct sequence of the partition
        is one row of the buckets, weighted by its copies, its random starts hashed from its
        content (:mod:`ldhmm.inference.copies`); the per-sequence outputs are one row per input
        sequence, in the partition's order. ``"each"``: a row per sequence, in bucket order, its
        random starts hashed from ``index``.
    m_step : {"collapsed", "paper"}, optional
        The M-step the E-step's sums serve: ``"collapsed"`` needs no sums of E log theta
        (:attr:`ldhmm.inference.cavi.e_step_totals.EStepTotals.sum_expected_log`), so they are
        not formed; ``"paper"`` or None (a caller that does not say): formed.
    """

    def __init__(
        self,
        data,
        guide,
        n_symbols: int,
        sparse: bool = False,
        bucket_cells: int = 1 << 20,
        e_step_max_iter: int = 100,
        e_step_tol: float = 1e-6,
        index=None,
        identical_sequences: str = "each",
        m_step: str | None = None,
    ):
        if identical_sequences not in IDENTICAL_SEQUENCES:
            raise ValueError(
                f"identical_sequences must be one of {IDENTICAL_SEQUENCES}, got {identical_sequences!r}"
            )
        self.ids = None
        self.copies = None
        if isinstance(data, PartitionSpec):
            db = read_partition(data)
            data, self.ids = db.sequences, list(db.ids)
            if index is None:
                # What a sequence's random starts are hashed from: its position in the database
                # where the ids are positions (data written without ids), else its id; never
                # where it sits in this partition.
                if all(i.isdigit() for i in self.ids):
                    index = np.array([int(i) for i in self.ids], dtype=np.int64)
                else:
                    index = np.array([zlib.crc32(i.encode()) for i in self.ids], dtype=np.int64)
        if data and not hasattr(data[0], "tokens"):
            sequences = validate_sequences(data, n_symbols)
            if identical_sequences == "once":
                self.copies = collapse_copies(sequences)
                sequences = self.copies.distinct
            self.buckets = make_buckets(sequences, max_cells=bucket_cells, sparse=sparse, n_symbols=n_symbols)
            lengths = [len(s) for s in data]
        else:
            self.buckets = list(data)
            lengths = [int(n) for b in self.buckets for n in b.lengths]
        self.n_sequences = len(lengths)
        self.n_tokens = int(sum(lengths))
        self._local = [b.index.clone() for b in self.buckets]  # positions in this partition
        if self.copies is not None:
            # Rows are distinct sequences (``index``: their row in ``copies.distinct``): random
            # starts from their content, sums weighed by their copies; the inputs' positions
            # are kept for the outputs.
            keys = torch.from_numpy(self.copies.keys)
            weights = torch.from_numpy(self.copies.counts.astype(np.float64))
            for b in self.buckets:
                b.start_keys, b.weights = keys[b.index], weights[b.index]
            self._input_index = np.arange(self.n_sequences) if index is None else np.asarray(index, np.int64)
        elif index is not None:
            # Buckets carry database positions: the E-step's random starts are hashed from
            # them, so a sequence starts alike whatever partition it is in.
            index = torch.as_tensor(np.asarray(index, dtype=np.int64))
            for b in self.buckets:
                b.index = index[b.index]
        self.guide = guide
        self.n_symbols = int(n_symbols)
        self.sparse = bool(sparse) or any(b.sparse for b in self.buckets)
        self.bucket_cells = bucket_cells
        self.e_step_max_iter = e_step_max_iter
        self.e_step_tol = e_step_tol
        # Only the paper's M-step reads the sums of E log theta: a collapsed fit's E-steps skip
        # forming them (the numbers of its fit are the same).
        self.log_sums = m_step != "collapsed"
        self.states = None
        self._count_table = None

    def size(self) -> tuple[int, int]:
        """(sequences, tokens) of this partition."""
        return self.n_sequences, self.n_tokens

    def symbol_counts(self) -> np.ndarray:
        """How often each symbol occurs in this partition, int64 (V,)."""
        counts = np.zeros(self.n_symbols, dtype=np.int64)
        for b in self.buckets:
            tokens = b.tokens[b.mask].numpy()
            if b.weights is None:
                counts += np.bincount(tokens, minlength=self.n_symbols)
            else:  # each row's tokens as many times as its copies
                copies = b.weights.numpy().astype(np.int64)[:, None].repeat(b.tokens.shape[1], 1)
                counts += np.bincount(
                    tokens, weights=copies[b.mask.numpy()], minlength=self.n_symbols
                ).astype(np.int64)
        return counts

    def set_guide(self, guide) -> None:
        """Use another guide from the next E-step on (a fit seeded by the PF guide)."""
        self.guide = guide

    def reset(self) -> None:
        """Forget the variational state (a new restart begins from cold starts)."""
        self.states = None
        self._count_table = None

    def set_states(self, states: list) -> None:
        """Continue from ``states`` (one BucketState per bucket, e.g. a kept fit's padded with
        an unused state) instead of cold starts at the next E-step."""

        def fits(st, b) -> bool:
            phi = st.guide_state
            return (
                st.counts["pi"].shape[0] == b.n_sequences
                and st.counts["B"].shape[2] == b.emission_width(self.n_symbols)
                and (not isinstance(phi, torch.Tensor) or tuple(phi.shape[:2]) == tuple(b.tokens.shape))
            )

        if len(states) != len(self.buckets) or not all(fits(st, b) for st, b in zip(states, self.buckets)):
            raise ValueError("set_states: the states do not match this partition's buckets")
        self.states = list(states)
        self._count_table = None

    def state_arrays(self) -> list | None:
        """The per-sequence state as numpy arrays (copies), one dict per bucket: ``counts_G``
        per group, ``entropy``, ``elbo``, ``local_elbo`` and the guide's ``phi`` where it has
        one (a checkpoint's state file); None without a state, or where the guide's state is
        not an array."""
        if self.states is None:
            return None
        out = []
        for st in self.states:
            phi = st.guide_state
            if phi is not None and not isinstance(phi, torch.Tensor):
                return None
            arrays = {f"counts_{g}": c.detach().cpu().numpy().copy() for g, c in st.counts.items()}
            for name in ("entropy", "elbo", "local_elbo"):
                arrays[name] = getattr(st, name).detach().cpu().numpy().copy()
            if phi is not None:
                arrays["phi"] = phi.detach().cpu().numpy().copy()
            out.append(arrays)
        return out

    def set_state_arrays(self, arrays: list) -> None:
        """Continue from the state :meth:`state_arrays` gave (ValueError where it does not fit
        this partition's buckets)."""
        if len(arrays) != len(self.buckets):
            raise ValueError(f"{len(arrays)} buckets of state, the partition has {len(self.buckets)}")
        states = []
        for index, (bucket_arrays, b) in enumerate(zip(arrays, self.buckets)):
            M, T = b.n_sequences, int(b.tokens.shape[1])
            pi_shape = np.shape(bucket_arrays["counts_pi"])
            K = int(pi_shape[-1]) if len(pi_shape) == 2 else -1
            W = b.emission_width(self.n_symbols)
            shapes = {"counts_pi": (M, K), "counts_A": (M, K, K), "counts_B": (M, K, W), "phi": (M, T, K)}
            shapes.update(entropy=(M,), elbo=(M,), local_elbo=(M,))
            for name, value in bucket_arrays.items():
                if name not in shapes or np.shape(value) != shapes[name]:
                    raise ValueError(f"bucket {index}: '{name}' of shape {np.shape(value)}")
            tensors = {k: torch.from_numpy(np.array(v)) for k, v in bucket_arrays.items()}
            counts = {k[len("counts_") :]: v for k, v in tensors.items() if k.startswith("counts_")}
            states.append(
                BucketState(
                    counts,
                    tensors["entropy"],
                    tensors.get("phi"),
                    tensors["elbo"],
                    tensors["local_elbo"],
                    {},
                    0,
                    b.symbols,
                )
            )
        self.set_states(states)

    def e_step(
        self, params: VariantParameters, starts: tuple = (), iteration: int | None = None
    ) -> EStepTotals:
        """One E-step of every bucket (warm from the kept state; ``starts`` as in
        :func:`ldhmm.inference.cavi.e_step_totals.e_step`; ``iteration``: the EM iteration, for
        the guide); returns the partition's sums."""
        self._count_table = None  # the last M-step's copy of the counts goes first
        self.states, totals = e_step(
            self.buckets,
            params,
            self.guide,
            self.states,
            max_iter=self.e_step_max_iter,
            tol=self.e_step_tol,
            starts=starts,
            iteration=iteration,
            log_sums=self.log_sums,
        )
        return totals

    def count_sums(self, alphas: dict, rows: dict) -> dict:
        """The collapsed M-step's Dirichlet-multinomial sums over this partition's counts of
        every group in ``alphas`` (name -> concentration (R, D)), for the rows flagged in
        ``rows`` (see :func:`ldhmm.inference.cavi.kernels.dirichlet_multinomial.table_sums`).

        The counts are gathered into a table at the first call after an E-step and kept until
        the next one (the M-step's passes all read the same counts)."""
        if self.states is None:
            raise RuntimeError("count_sums needs an E-step first")
        shapes = {g: tuple(np.shape(a)) for g, a in alphas.items()}
        table = self._count_table
        if table is None or any(table.shapes.get(g) != shape for g, shape in shapes.items()):
            self._count_table = None
            weights = None if self.copies is None else [b.weights.numpy() for b in self.buckets]
            table = self._count_table = state_count_table(self.states, shapes, weights)
        return table_sums(table, alphas, rows)

    def score(self, params: VariantParameters, starts: tuple, out_path: str | None = None):
        """The held-out E-step of this partition's sequences (every start in ``starts``, from
        cold) and their per-sequence ELBO. A sequence the model gives probability 0
        (:mod:`ldhmm.inference.cavi.support`) is left out of the E-step and scores -inf (its
        log-likelihood), never NaN; the others are bucketed without it.

        Returns (keys, ELBO (M_p,)): keys are database positions, or the sequence ids of a
        partitioned directory. With ``out_path``, writes them instead to that Parquet file
        (columns ``sequence``, ``elbo``), where the worker runs, and returns the path.
        """
        first = self._impossible(params)
        impossible = None if first is None else first >= 0
        if impossible is None or not impossible.any():
            states = self._held_out(params, starts)
            elbo = np.concatenate([st.elbo.double().numpy() for st in states]) if states else np.empty(0)
        else:
            elbo = np.full(sum(b.n_sequences for b in self.buckets), -np.inf)
            buckets, rows = self._possible_buckets(impossible)
            states = self._held_out(params, starts, buckets) if buckets else []
            for r, st in zip(rows, states):
                elbo[r] = st.elbo.double().numpy()
        elbo = self._per_input(elbo)
        keys = self._keys()
        if out_path is None:
            return keys, elbo
        _write(pa.table({"sequence": pa.array(keys.tolist()), "elbo": pa.array(elbo)}), out_path)
        return out_path

    def posterior(self, params: VariantParameters, starts: tuple, out_path: str | None = None):
        """Each sequence's variational posterior after the held-out E-step
        (:func:`ldhmm.inference.cavi.posterior.bucket_posterior`).

        Returns (keys, list of per-sequence dicts), or with ``out_path`` writes one Parquet row
        per sequence there (:func:`ldhmm.inference.cavi.posterior.posterior_table`) and returns the
        path. A sequence the model gives probability 0 is an ImpossibleSequenceError (a
        ValueError) naming it.
        """
        self._require_possible(params)
        states = self._held_out(params, starts)
        rows = []
        for b, st in zip(self.buckets, states):
            rows.extend(values for _, values in bucket_posterior(params, self.guide, b, st))
        rows = self._per_input(rows)
        keys = self._keys()
        if out_path is None:
            return keys, rows
        _write(posterior_table(keys, rows, params, self.sparse), out_path)
        return out_path

    def predict_next_proba(self, params: VariantParameters, starts: tuple):
        """Each sequence's posterior predictive distribution of its next symbol after the
        held-out E-step (:func:`ldhmm.inference.cavi.posterior.next_symbol_proba`).

        Returns (keys, (M_p, V) float64). A sequence the model gives probability 0 is a
        ValueError naming it.
        """
        self._require_possible(params)
        states = self._held_out(params, starts)
        values = [next_symbol_proba(params, self.guide, b, st) for b, st in zip(self.buckets, states)]
        return self._keys(), self._per_input(
            np.concatenate(values) if values else np.empty((0, self.n_symbols))
        )

    def decode(self, params: VariantParameters, starts: tuple):
        """Each sequence's most probable state path after the held-out E-step
        (:func:`ldhmm.inference.cavi.posterior.viterbi_paths`).

        Returns (keys, list of (N_m,) int64 arrays). A sequence the model gives probability 0
        is a ValueError naming it.
        """
        self._require_possible(params)
        states = self._held_out(params, starts)
        paths = [path for b, st in zip(self.buckets, states) for path in viterbi_paths(params, b, st)]
        return self._keys(), self._per_input(paths)

    def log_marginal_is(
        self, params: VariantParameters, starts: tuple, n_samples: int, seed: int, out_path: str | None = None
    ):
        """Importance-sampled ``log p(x)`` of each sequence
        (:func:`ldhmm.inference.cavi.posterior.log_marginal_is`), draws seeded by ``seed``.

        Returns (keys, (M_p,) estimates), or with ``out_path`` writes them (columns
        ``sequence``, ``log_marginal``) there and returns the path. A sequence the model gives
        probability 0 is a ValueError naming it.
        """
        keys, estimate = self._importance(params, starts, n_samples, seed)
        if out_path is None:
            return keys, estimate
        _write(pa.table({"sequence": pa.array(keys.tolist()), "log_marginal": pa.array(estimate)}), out_path)
        return out_path

    def log_marginal_is_diagnostics(
        self, params: VariantParameters, starts: tuple, n_samples: int, seed: int
    ):
        """:meth:`log_marginal_is` (the same draws and numbers) with each estimate's standard error
        and effective sample size: (keys, (M_p, 3) array of estimate, standard error, ESS)."""
        diagnostics: list = []
        keys, estimate = self._importance(params, starts, n_samples, seed, diagnostics)
        std_error = self._per_input(
            np.concatenate([d[0] for d in diagnostics]) if diagnostics else np.empty(0)
        )
        ess = self._per_input(np.concatenate([d[1] for d in diagnostics]) if diagnostics else np.empty(0))
        return keys, np.stack([estimate, std_error, ess], axis=1)

    def _importance(self, params, starts, n_samples, seed, diagnostics=None):
        """Keys and importance-sampled estimates of the partition (seeded by ``seed``)."""
        self._require_possible(params)
        states = self._held_out(params, starts)
        with torch.random.fork_rng():
            torch.manual_seed(int(seed))
            values = log_marginal_is(params, self.buckets, states, n_samples, self.bucket_cells, diagnostics)
        return self._keys(), self._per_input(np.concatenate(values) if values else np.empty(0))

    def _held_out(self, params: VariantParameters, starts: tuple, buckets: list | None = None) -> list:
        """The held-out E-step from cold (every start in ``starts``) of ``buckets`` (default:
        the partition's); keeps no state."""
        self.states = None  # a fit's state goes before the E-step allocates its own
        self._count_table = None
        states, _ = e_step(
            self.buckets if buckets is None else buckets,
            params,
            self.guide,
            None,
            max_iter=self.e_step_max_iter,
            tol=self.e_step_tol,
            starts=starts,
        )
        return states

    def _possible_buckets(self, impossible: np.ndarray) -> tuple[list, list]:
        """The sequences not marked ``impossible`` (bucket order, (M_p,) bool), bucketed anew in
        this partition's order with their database positions; and each new bucket's rows in
        bucket order of the partition."""
        tokens = self._sequences()
        local = np.concatenate([i.numpy() for i in self._local])
        index = np.concatenate([b.index.numpy() for b in self.buckets])
        kept = np.array([r for r in np.argsort(local, kind="stable") if not impossible[r]], dtype=np.int64)
        if kept.size == 0:
            return [], []
        kept_tokens = [tokens[r] for r in kept]
        buckets = make_buckets(
            kept_tokens, max_cells=self.bucket_cells, sparse=self.sparse, n_symbols=self.n_symbols
        )
        random_keys = np.concatenate([b.random_keys.numpy() for b in self.buckets])
        rows = []
        for b in buckets:
            rows.append(kept[b.index.numpy()])
            b.index = torch.as_tensor(index[rows[-1]])
            if self.copies is not None:
                b.start_keys = torch.as_tensor(random_keys[rows[-1]])
        return buckets, rows

    def _sequences(self) -> list:
        """The partition's sequences (views of the buckets' tokens), in bucket order."""
        return [b.tokens[r, :n].numpy() for b in self.buckets for r, n in enumerate(b.lengths.tolist())]

    def _per_input(self, values):
        """Per-row values in bucket order (an array, first axis, or a list) as one per input
        sequence in the partition's order where identical sequences were computed once (each
        copy its distinct sequence's value); else as they are."""
        if self.copies is None:
            return values
        rows = np.concatenate([i.numpy() for i in self._local])  # bucket order -> distinct row
        where = np.empty(rows.size, dtype=np.int64)
        where[rows] = np.arange(rows.size)
        take = where[self.copies.inverse]
        if isinstance(values, list):
            return [values[r] for r in take]
        return np.asarray(values)[take]

    def _input_sequences(self) -> list:
        """The sequences in the order of :meth:`_per_input` (bucket order without copies)."""
        if self.copies is None:
            return self._sequences()
        return [self.copies.distinct[r] for r in self.copies.inverse]

    def _keys(self) -> np.ndarray:
        """Database positions (or ids) of the sequences, in bucket order (in the partition's
        order where identical sequences were computed once)."""
        if self.copies is not None:
            return np.asarray(self.ids, dtype=object) if self.ids is not None else self._input_index.copy()
        if self.ids is not None:
            local = np.concatenate([i.numpy() for i in self._local]) if self._local else np.empty(0, np.int64)
            return np.asarray(self.ids, dtype=object)[local]
        return (
            np.concatenate([b.index.numpy() for b in self.buckets]) if self.buckets else np.empty(0, np.int64)
        )

    def _impossible(self, params: VariantParameters) -> np.ndarray | None:
        """The first event of each sequence (bucket order) that the model gives probability 0
        (:func:`ldhmm.inference.cavi.support.first_impossible_event`; -1: possible), or None
        when the model forbids nothing."""
        support = supports(params)
        if support is None or not self.buckets:
            return None
        return np.concatenate(
            [first_impossible_event(support, b.tokens.numpy(), b.mask.numpy()) for b in self.buckets]
        )

    def _require_possible(self, params: VariantParameters) -> None:
        """:class:`ldhmm.inference.cavi.support.ImpossibleSequenceError` naming the first
        sequence (in the input order) the model gives probability 0, and its first such
        event: no posterior exists."""
        first = self._impossible(params)
        if first is None or (first < 0).all():
            return
        first = self._per_input(first)
        bad = np.flatnonzero(first >= 0)
        # the first in the input order: database positions, or a directory's row order
        if self.copies is not None:
            order = self._input_index if self.ids is None else np.arange(self.n_sequences)
        else:
            order = self._keys() if self.ids is None else np.concatenate([i.numpy() for i in self._local])
        row = int(bad[np.argmin(order[bad])])
        event = int(first[row])
        symbol = int(self._input_sequences()[row][event])
        key = self._keys()[row]
        key = key.item() if isinstance(key, np.generic) else key
        raise ImpossibleSequenceError(key, event, symbol, impossible_reason(supports(params), symbol))

    def impossible(self, params: VariantParameters, starts: tuple = ()):
        """(keys, first impossible event (M_p,) int64, its symbol (M_p,) int64): -1 and -1 for
        a sequence the model can score. ``starts`` is not used (the call's shape is that of the
        other per-sequence methods)."""
        first = self._impossible(params)
        first = np.full(self.n_sequences, -1, dtype=np.int64) if first is None else self._per_input(first)
        tokens = self._input_sequences()
        symbols = np.array([tokens[r][e] if e >= 0 else -1 for r, e in enumerate(first)], dtype=np.int64)
        return self._keys(), np.stack([first, symbols], axis=1) if len(first) else np.empty((0, 2), np.int64)

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(database positions, per-sequence ELBO) after the last E-step."""
        elbo = np.concatenate([st.elbo.double().numpy() for st in self.states])
        if self.copies is not None:
            return self._input_index.copy(), self._per_input(elbo)
        index = np.concatenate([b.index.numpy() for b in self.buckets])
        return index, elbo


def reduce_totals(parts: list[EStepTotals]) -> EStepTotals:
    """The database's sums from the partitions' (in partition order; a single partition's come
    back unchanged: 0 + x = x)."""
    local, n, sweeps = 0.0, 0, 0
    sum_elog: dict = {}
    totals: dict = {}
    for part in parts:
        n += part.n_sequences
        local += part.local_elbo
        sweeps = max(sweeps, part.max_sweeps)
        for g, v in part.sum_expected_log.items():
            sum_elog[g] = sum_elog.get(g, 0.0) + v
        for g, v in part.total_counts.items():
            totals[g] = totals.get(g, 0.0) + v
    return EStepTotals(n, local, sum_elog, totals, sweeps)


def reduce_count_sums(parts: list) -> dict:
    """Add the partitions' Dirichlet-multinomial sums ({group: (entry, row)}) in partition
    order, starting from zero (0 + x = x; -0.0 becomes 0.0).

    The first partition's arrays are reused as the accumulator (a round's results are fresh
    arrays, owned by this call): at V = 10^6 a copy is 3 x 8 K MB per pass.
    """
    total = {}
    for g, (entry, row) in parts[0].items():
        entry, row = _writable(entry), _writable(row)
        entry += 0.0
        row += 0.0
        total[g] = (entry, row)
    for part in parts[1:]:
        for g, (entry, row) in part.items():
            total[g][0][...] += entry
            total[g][1][...] += row
    return total


def _writable(array) -> np.ndarray:
    """``array`` as float64 that may be added into: itself where it can be (results that arrive
    from another process may be read-only views of the message), else a copy."""
    array = np.asarray(array, dtype=np.float64)
    return array if array.flags.writeable else array.copy()


class LocalBackend:
    """Partition workers in this process, run one after the other.

    The in-process fit is :meth:`ldhmm.inference.em.VariationalEM.fit_backend` over this
    backend with one partition holding every bucket; a distributed fit is the same driver over
    :class:`ldhmm.inference.distributed.dask_backend.DaskBackend`.
    """

    def __init__(self, workers: list[PartitionWorker]):
        self.workers = list(workers)
        self.recoveries: list[Recovery] = []

    @property
    def n_partitions(self) -> int:
        return len(self.workers)

    def call(self, method: str, *args, iteration: int = 0, step: str = "") -> list:
        """``method(*args)`` on every worker; results in partition order."""
        return [getattr(w, method)(*args) for w in self.workers]

    def call_each(self, method: str, arguments: list) -> list:
        """``method(*arguments[i])`` on worker i; results in partition order."""
        return [getattr(w, method)(*args) for w, args in zip(self.workers, arguments)]

    @property
    def states(self):
        """The bucket states of a single in-process partition (None otherwise)."""
        return self.workers[0].states if len(self.workers) == 1 else None


def as_numpy_params(params: VariantParameters) -> VariantParameters:
    """The parameters with contiguous CPU tensors (what travels to a worker)."""
    return VariantParameters(
        params.sharing,
        {g: t.detach().cpu().contiguous() for g, t in params.prior.items()},
        {g: t.detach().cpu().contiguous() for g, t in params.posterior.items()},
        {g: t.detach().cpu().contiguous() for g, t in params.log_point.items()},
    )


def _write(table, path: str) -> None:
    """Write a Parquet file atomically (:func:`ldhmm.data.atomic.write_atomically`)."""
    write_atomically(path, lambda f: pq.write_table(table, f), binary=True)
