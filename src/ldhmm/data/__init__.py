"""The data layer of ldhmm.

* :class:`SequenceDatabase`: integer-coded sequences stored compactly, with vocabulary,
  optional labels and ids, length statistics and a text format (``to_text``/``from_text``).
* UCI loaders: :func:`load_msnbc`, :func:`load_entree`, :func:`load_splice`,
  :func:`load_dataset`, and :func:`load_paper_subset` for the paper's length-filtered subsets.
* :func:`kfold_indices`: deterministic (stratified) K-fold splits.
* A user's own data: :class:`Vocabulary`, :func:`load_text`, :func:`load_event_log`, and
  :func:`load_path`, which tells a file's format from the file, and :func:`recode`, which maps
  a file's symbols into a saved model's vocabulary by name.
* :class:`DataOptions` (:mod:`ldhmm.data.selection`): how a user's file is read (columns,
  separator) and which of its events (:func:`select_events`, :func:`read_event_map`) and
  sequences (length limits) are used; the data options of every ``ldhmm`` command.
* Partitioned data sets (a directory of Parquet files plus ``dataset.json``) that cluster
  workers read without a driver: :func:`write_partitioned`, :func:`plan_partitions` into
  :class:`PartitionSpec`, :func:`read_partition`, :func:`load_partitioned`, and
  :func:`balanced_partitions` for balanced in-memory partitions.
* :func:`fetch`: download a UCI data set with checksum verification.

Errors in a file raise :class:`DataFormatError` (a ``ValueError``) naming file and line.
"""

from .database import DataFormatError, SequenceDatabase
from .fetch import DATASETS, ChecksumError, DatasetSource, fetch
from .files import load_path
from .partitions import (
    LAYOUTS,
    PartitionSpec,
    balanced_partitions,
    is_partitioned,
    load_partitioned,
    plan_partitions,
    read_manifest,
    read_partition,
    write_partitioned,
)
from .selection import DataOptions, read_event_map, select_events
from .splits import kfold_indices
from .uci import (
    DATA_ENV_VAR,
    DATASET_NAMES,
    ENTREE_CODEBOOK,
    PAPER_SUBSET_COUNTS,
    PAPER_SUBSETS,
    SPLICE_CLASSES,
    load_dataset,
    load_entree,
    load_msnbc,
    load_paper_subset,
    load_splice,
    read_entree_sessions,
    read_msnbc,
    read_splice,
    resolve_data_dir,
)
from .userdata import UNKNOWN, EventOrderWarning, Vocabulary, load_event_log, load_text, recode

__all__ = [
    "DataFormatError",
    "SequenceDatabase",
    "DATASETS",
    "ChecksumError",
    "DatasetSource",
    "fetch",
    "kfold_indices",
    "DATA_ENV_VAR",
    "DATASET_NAMES",
    "ENTREE_CODEBOOK",
    "PAPER_SUBSET_COUNTS",
    "PAPER_SUBSETS",
    "SPLICE_CLASSES",
    "load_dataset",
    "load_entree",
    "load_msnbc",
    "load_paper_subset",
    "load_splice",
    "read_entree_sessions",
    "read_msnbc",
    "read_splice",
    "resolve_data_dir",
    "UNKNOWN",
    "Vocabulary",
    "load_event_log",
    "EventOrderWarning",
    "load_text",
    "load_path",
    "recode",
    "DataOptions",
    "select_events",
    "read_event_map",
    "LAYOUTS",
    "PartitionSpec",
    "balanced_partitions",
    "is_partitioned",
    "load_partitioned",
    "plan_partitions",
    "read_manifest",
    "read_partition",
    "write_partitioned",
]
