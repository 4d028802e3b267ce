"""Memory estimates: refuse a fit or a scoring run that cannot fit in memory, before allocating.

A model of K states over V symbols keeps, per sequence, the expected counts of its own
pi (K), A (K x K) and B (K x V), and per token the hidden-state marginals; each E-step batch
(at most ``bucket_cells`` padded positions) holds a few K-vectors per position. Importance
sampling draws theta for a batch of sequences at once. The estimates below count those arrays
(float64 unless told otherwise), with the formulas of the largest scratch next to the code that
allocates it (:mod:`ldhmm.inference.cavi.expectation`). They are upper bounds on the peak
resident memory a command adds to the interpreter and its libraries (torch, numba's kernels;
about 0.6 GB, not counted), within a small factor of it: ``tests/test_memory_bound.py`` and
``benchmarks/memory_estimates.py`` measure both (``docs/performance.md``, "Memory estimates").
Not counted: the torch route of the E-step (float32, other devices, chains whose scaled
recursion underflows), which forms per-position K x K arrays.

The limit is the machine's memory (physical, or the cgroup's limit when lower) unless
overridden: :func:`set_max_memory`, the environment variable ``LDHMM_MAX_MEMORY`` (``"64G"``,
``"512M"``, bytes), or the CLI's ``--max-memory``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from ..inference.cavi.context_vem import BATCH_POSITIONS as CONTEXT_BATCH_POSITIONS
from ..inference.cavi.sequence_starts import BEST_OF_STARTS_COPIES, start_scratch_bytes

__all__ = [
    "MemoryEstimateError",
    "parse_size",
    "format_size",
    "machine_memory",
    "memory_limit",
    "set_max_memory",
    "max_memory_limit",
    "max_memory_override",
    "fit_bytes",
    "contextual_fit_bytes",
    "score_bytes",
    "posterior_bytes",
    "POSTERIOR_VALUE_BYTES",
    "INPUT_BYTES_PER_TOKEN",
    "INPUT_BYTES_PER_SEQUENCE",
    "COMMAND_BYTES",
    "WORKER_PROCESS_BYTES",
    "PARTITION_KV_ARRAYS",
    "importance_sampling_bytes",
    "IS_DRAW_COPIES",
    "model_file_bytes",
    "NAME_BYTES",
    "READ_BYTES_PER_CONTENT_BYTE",
    "read_bytes",
    "check_memory",
    "MAX_MEMORY_ENV_VAR",
]

MAX_MEMORY_ENV_VAR = "LDHMM_MAX_MEMORY"
#: Every check logs its estimate here at DEBUG level (``what``, bytes, limit): the benchmark
#: ``benchmarks/memory_estimates.py`` compares them with measured peaks.
LOGGER = logging.getLogger("ldhmm.memory")
_OVERRIDE: int | None = None
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class MemoryEstimateError(ValueError):
    """What was asked for needs more memory than the limit (the message says how much and
    which knob to turn)."""


def parse_size(text) -> int:
    """``"64G"``, ``"512M"``, ``"1.5T"``, ``"2e9"`` or an int -> bytes (powers of 1024)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"a memory size must be > 0, got {text}")
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a memory size like 64G, 512M or 2000000000")
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if size < 1:
        raise ValueError(f"{text!r} is less than one byte; give a size like 64G or 512M")
    return size


def format_size(n: float) -> str:
    """Bytes as ``"61.2 GB"`` (decimal units, as allocators print them)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def machine_memory() -> int:
    """Physical memory, or the cgroup's memory limit when that is lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 * 2**30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return int(total)


def set_max_memory(size) -> None:
    """Override the limit in this process (None: back to the environment or the machine).

    The environment is left alone: the worker processes of ``--jobs`` get the override as an
    argument (:func:`max_memory_override`, passed on by :func:`ldhmm.experiments.tasks.run_tasks`),
    so they check against the same limit and results do not depend on the number of workers.
    """
    global _OVERRIDE
    _OVERRIDE = None if size is None else parse_size(size)


@contextlib.contextmanager
def max_memory_limit(size):
    """:func:`set_max_memory` for the length of a ``with`` block (a command run in-process, as
    ``ldhmm.cli.main([...])`` from Python or a test): the limit before it comes back after."""
    global _OVERRIDE
    before = _OVERRIDE
    set_max_memory(size)
    try:
        yield
    finally:
        _OVERRIDE = before


def max_memory_override() -> int | None:
    """The limit :func:`set_max_memory` set in this process, in bytes; None when not set."""
    return _OVERRIDE


def memory_limit() -> int:
    """The limit estimates are checked against."""
    if _OVERRIDE is not None:
        return _OVERRIDE
    env = os.environ.get(MAX_MEMORY_ENV_VAR)
    if env:
        try:
            return parse_size(env)
        except ValueError as err:
            raise ValueError(f"environment variable {MAX_MEMORY_ENV_VAR}: {err}") from None
    return machine_memory()


def _per_sequence_values(K: int, V: int) -> int:
    return K + K * K + K * V


def _emission_values(K: int, V: int, n_sequences: int, n_tokens: int, max_length: int, sparse: bool) -> int:
    """Values of every sequence's emission counts: K x V each (dense layout), or K + 1 per
    distinct symbol of a sequence (sparse: at most its length, padded within a batch)."""
    if not sparse:
        return int(n_sequences) * K * V
    slots = min(int(1.25 * n_tokens) + int(n_sequences), int(n_sequences) * min(V, max(1, int(max_length))))
    return (K + 1) * slots


def _state_values(K: int, V: int, n_sequences: int, n_tokens: int, max_length: int, sparse: bool) -> int:
    """Values of the per-sequence expected counts of pi (K), A (K x K) and B."""
    return int(n_sequences) * (K + K * K) + _emission_values(K, V, n_sequences, n_tokens, max_length, sparse)


#: Bytes per token and per sequence of a database read from a log (int64 tokens, a numpy array
#: and its ids per sequence, the parser's line and name objects while it reads) and bucketed
#: (padded int64 tokens, the mask, slots).
INPUT_BYTES_PER_TOKEN = 120
INPUT_BYTES_PER_SEQUENCE = 600
#: A command's allocations that do not scale with the data (its first tables, the parser's and
#: the writer's buffers, caches filled on first use): measured up to about 2 MB.
COMMAND_BYTES = 4 * 2**20
#: K x V arrays each partition beyond the first holds when several live in one process.
PARTITION_KV_ARRAYS = 4
#: Resident memory of a worker process of ``--jobs`` before its first fit: the interpreter with
#: torch, Pyro, numba and its kernels, gensim and hmmlearn (measured 0.49 GB after the imports,
#: about 0.6 GB with the kernels loaded); ``--jobs J > 1`` starts J of them.
WORKER_PROCESS_BYTES = 768 * 2**20


def fit_bytes(
    K: int,
    V: int,
    n_sequences: int,
    n_tokens: int,
    max_length: int,
    bucket_cells: int = 1 << 20,
    sparse: bool = False,
    largest_bucket: tuple | None = None,
    partitions: int = 1,
    path_states: int = 0,
) -> int:
    """Peak bytes of a variational EM fit (or an E-step) of M sequences, T tokens, beyond the
    interpreter and its libraries (torch, numba's kernels: ``docs/performance.md``, "Memory
    estimates", measures both).

    - the per-sequence expected counts of pi, A and B, kept for the whole fit, and the
      collapsed M-step's table of them (a second copy); K x K and K x V per sequence dominate
      at large K or V in the dense emission layout (K = 5000 on Entree's 422 sessions:
      2 x 422 x 5000^2 x 8 bytes = 169 GB); ``sparse``: the layout that keeps a sequence's
      counts at its own symbols only (:mod:`ldhmm.inference.cavi.emissions`);
    - the E-step of the largest bucket (``largest_bucket``: its padded positions and the most
      sequences in a bucket, :func:`ldhmm.inference.batch.bucket_cells` of the lengths; by
      default ``min(bucket_cells, M x L)`` and ``M``): its states alive at once while the starts race
      (:data:`ldhmm.inference.cavi.sequence_starts.BEST_OF_STARTS_COPIES`), and the larger of a
      start's scratch (:func:`ldhmm.inference.cavi.sequence_starts.start_scratch_bytes`) and the
      compiled recursion's potentials, messages and marginals (ten K-vectors per position);
    - per token three K-vectors (a mean-field guide's factors), database-level a dozen K x V
      arrays (priors, their special functions, the M-step's sums);
    - the database itself (:data:`INPUT_BYTES_PER_TOKEN`, :data:`INPUT_BYTES_PER_SEQUENCE`)
      and :data:`COMMAND_BYTES`;
    - ``partitions`` > 1 held in this process (``--partitions`` in process): each partition's
      own K x V arrays (its sums by symbol and expectations of B), four per partition beyond
      the first (measured 1.6-2.5: ``docs/performance.md``, "Memory estimates");
    - ``path_states``: fits along K hold the per-sequence state of the fit with ``path_states``
      states (K - 1) while K is fitted (:func:`ldhmm.models.path.continue_previous`); 0: none.
    """
    M, T, L = int(n_sequences), int(n_tokens), int(max_length)
    if largest_bucket is None:
        cells, bucket_sequences = min(int(bucket_cells), M * L), min(M, int(bucket_cells))
    else:
        cells, bucket_sequences = (int(n) for n in largest_bucket)
    bucket_state = _state_values(K, V, bucket_sequences, min(T, cells), L, sparse)
    values = (
        2 * _state_values(K, V, M, T, L, sparse)
        + M * (2 * K + 1)
        + BEST_OF_STARTS_COPIES * bucket_state
        + 3 * T * K
        + 12 * K * V
        + PARTITION_KV_ARRAYS * (max(1, int(partitions)) - 1) * K * V
        + (_state_values(int(path_states), V, M, T, L, sparse) if path_states else 0)
    )
    data = INPUT_BYTES_PER_TOKEN * T + INPUT_BYTES_PER_SEQUENCE * M
    # a start's scratch is let go before its run's recursion allocates: one or the other
    scratch = max(start_scratch_bytes(cells, L, K), 8 * 10 * cells * K)
    return int(8 * values + scratch + data + COMMAND_BYTES)


def contextual_fit_bytes(K: int, C: int, V: int, n_sequences: int, n_tokens: int, is_draws: int = 1) -> int:
    """Peak bytes of a fit (or a scoring) of LDHMM with contextual emissions
    (:mod:`ldhmm.inference.cavi.context_vem`), M sequences, T tokens, C context rows, beyond the
    interpreter and its libraries:

    - per sequence, its counts of pi and A and a K-vector per (context, symbol) pair it holds
      (at most one per token), kept for the whole fit with the E-step's results and the
      batches' pair tables: eight copies of ``M (K + K^2) + T K``, and the collapsed M-step's
      count table (its values, keys and bounds: three per positive count);
    - one batch's E-step (:data:`ldhmm.inference.cavi.context_vem.BATCH_POSITIONS` padded
      positions, ``is_draws`` of them side by side when importance sampling): the chain's
      potentials, messages and marginals, ten K-vectors per position, and K x K per position
      for the moves;
    - database-level a dozen K x C x V arrays (priors, their sums, the M-step's candidates),
      four more for the context smoothing's pseudo-counts in the count table, and four more for
      the M-step's sums of the smoothing's pseudo-sequence beside the partitions' (each pass's
      dense (3, K C, V) results, added into the first: :func:`ldhmm.models.contextual_fit.partition_sums`);
    - the database itself and :data:`COMMAND_BYTES`.
    """
    M, T = int(n_sequences), int(n_tokens)
    positions = min(CONTEXT_BATCH_POSITIONS, max(T, 1)) * max(1, int(is_draws))
    values = (
        8 * (M * (K + K * K) + T * K)
        + 3 * (M * (K + K * K) + T * K)
        + positions * (10 * K + 2 * K * K)
        + 20 * K * C * V
    )
    data = INPUT_BYTES_PER_TOKEN * T + INPUT_BYTES_PER_SEQUENCE * M
    return int(8 * values + data + COMMAND_BYTES)


#: Peak bytes of scoring (the held-out E-step): a fit's E-step, so the same estimate.
score_bytes = fit_bytes

#: Bytes per value of ``posterior``'s output (the per-sequence posterior means and marginals):
#: the rows' arrays, the stacked means, the table's columns and the writer's buffers, or a CSV's
#: Python floats and JSON text (measured about 120 with Parquet; ``docs/performance.md``).
POSTERIOR_VALUE_BYTES = 192


def posterior_bytes(
    K: int,
    V: int,
    n_sequences: int,
    n_tokens: int,
    max_length: int,
    bucket_cells: int = 1 << 20,
    sparse: bool = False,
    largest_bucket: tuple | None = None,
    partitions: int = 1,
) -> int:
    """Peak bytes of ``posterior``: the held-out E-step (:func:`score_bytes`) and its output,
    every sequence's K + K x K + K x V posterior means (K x 2 per own symbol in the sparse
    layout) and N x K marginals, at :data:`POSTERIOR_VALUE_BYTES` each."""
    M, T = int(n_sequences), int(n_tokens)
    output = _state_values(K, V, M, T, max_length, sparse) + T * K
    e_step = score_bytes(K, V, M, T, max_length, bucket_cells, sparse, largest_bucket, partitions)
    return int(e_step + POSTERIOR_VALUE_BYTES * output)


def importance_sampling_bytes(
    K: int,
    V: int,
    n_sequences: int,
    max_length: int,
    n_samples: int,
    bucket_cells: int = 1 << 20,
    sparse: bool = False,
    chunk: int = 256,
    min_length: int = 1,
) -> int:
    """Peak bytes of ``log_marginal_is``: per batch, draws of pi, A, B for as many (sample,
    sequence) pairs as fit in the batch's cells (a bucket of short sequences holds the most
    pairs: up to ``bucket_cells / min_length``, the shortest sequence's length; measured 1.6 x
    the count by the longest sequence at M = 10^4),
    :data:`IS_DRAW_COPIES` copies each (the draw, its log, the proposal repeated per draw, the
    densities' terms; at V = 40,051 in the sparse layout 1.48 x an estimate with three); the
    chain's potentials, messages and marginals of those pairs (ten K-vectors per position, at
    most ``bucket_cells`` positions);
    and every sample's log-weight of the sequences drawn together, kept until their log-sum-exp
    (twice: the pieces and their concatenation), which grows with ``n_samples`` whatever the
    batch; and :data:`COMMAND_BYTES`. ``sparse``: B is drawn over the symbols of
    ``chunk`` sequences plus one lumped remainder, not over all V, for those sequences only
    (:func:`ldhmm.inference.cavi.posterior.log_marginal_is`)."""
    M, L, cells = int(n_sequences), max(1, int(max_length)), int(bucket_cells)
    # a bucket of M_b sequences of length <= L_b draws S = min(n_samples, cells // (M_b L_b))
    # samples at once (at least one): S M_b pairs, at most cells / L_b, which a bucket of the
    # shortest sequences reaches whatever the longest; S M_b L_b positions, at most the cells
    # (or one sequence longer than them)
    pairs = max(1, min(int(n_samples) * M, max(cells // max(1, int(min_length)), M)))
    if sparse:  # the draws of one chunk of sequences at a time: at most n_samples each
        pairs = min(pairs, int(n_samples) * min(M, chunk))
    positions = min(pairs * L, max(cells, L))
    width = min(V, chunk * L + 1) if sparse else V
    together = min(M, chunk) if sparse else M
    draws = IS_DRAW_COPIES * pairs * _per_sequence_values(K, width) + 10 * positions * K
    if sparse:  # the chunk's counts of B made dense over its symbols (LocalView.dense_counts)
        draws += min(M, chunk) * K * width
    return int(8 * draws + 8 * 2 * int(n_samples) * together + COMMAND_BYTES)


#: Copies of each importance-sampling draw alive at once (:func:`importance_sampling_bytes`).
IS_DRAW_COPIES = 5

#: Bytes of one symbol name held in memory: the Python string, its list slot, its entry in a
#: vocabulary's index (a name of up to ten characters; measured ~170).
NAME_BYTES = 200


def model_file_bytes(entries: int, text_bytes: int = 0, names: int = 0) -> int:
    """Peak bytes of reading and checking a model file, before any of it is read.

    ``entries``: values of its arrays, each read (8 bytes), converted, checked and turned
    into a tensor (three more copies at most); ``text_bytes``: the JSON text, parsed (a Python
    float and its list slot, 32 bytes, per number of a few characters: four times the text);
    ``names``: symbol names made for a model saved without a vocabulary (one per symbol, when a
    log is mapped into its codes).
    """
    return int(4 * 8 * entries + 4 * text_bytes + NAME_BYTES * names)


#: Peak bytes of reading a data file, per byte of its (decompressed) content: every token held
#: as a Python string in a list until the vocabulary is built (a two-character token and its
#: separator, 3 bytes of text, take 59), beside its line and the arrays the codes go to.
READ_BYTES_PER_CONTENT_BYTE = 32


def read_bytes(content_bytes: int) -> int:
    """Peak bytes of reading a data file of ``content_bytes`` bytes of content (a gzip file's
    decompressed; :func:`ldhmm.data.regular_files.content_bytes`), checked before reading."""
    return int(READ_BYTES_PER_CONTENT_BYTE * content_bytes + COMMAND_BYTES)


def check_memory(needed: int, what: str, knob: str) -> None:
    """Raise :class:`MemoryEstimateError` when ``needed`` bytes exceed :func:`memory_limit`.

    Parameters
    ----------
    needed : int
        The estimate.
    what : str
        What needs it ("K = 5000 states, V = 7 symbols, 422 sequences").
    knob : str
        What to turn ("fewer states (--states)").
    """
    limit = memory_limit()
    LOGGER.debug("%s: estimate %d bytes, limit %d", what, int(needed), limit)
    if needed > limit:
        raise MemoryEstimateError(
            f"{what} needs about {format_size(needed)} of memory, more than the {format_size(limit)} "
            f"available: use {knob}, or raise the limit with --max-memory / {MAX_MEMORY_ENV_VAR} "
            f"(e.g. {MAX_MEMORY_ENV_VAR}=64G) to try anyway"
        )
