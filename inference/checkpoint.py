"""The EM driver's checkpoint: a fit that was stopped resumes where it stopped, with the numbers of
an uninterrupted fit.

``DIR/checkpoint.npz`` (numpy's NPZ, its arrays stored uncompressed, read without pickle),
rewritten atomically (:func:`ldhmm.data.atomic.write_atomically`) after every EM iteration. It
holds, for each run of the fit in the order the fit runs them (the restarts, the PF fit that
seeds a mean-field guide, the fit from ``init_params``):

- a finished run: its result (final parameters, ELBO histories, trace, stopping report);
- the run in progress: the rule's history and verdicts, the parameters after its last M-step,
  the per-sequence variational state after one of its E-steps (a *state file*, below), and the
  parameters and starts of every E-step since (the run's *journal*).

Every :data:`STATE_EVERY` EM iterations the run in progress writes its per-sequence state
(each partition's expected counts and the guide's state) to ``DIR/checkpoint.state.rR.iN.npz``
(run R after EM iteration N: a state file of :mod:`ldhmm.inference.state_store`, its manifest
naming the fit, the run and the iteration) and empties its journal; the checkpoint then names that
file, and older state files are removed. A state file written before that store (the same arrays,
no manifest) is read as before: a checkpoint of an earlier ldhmm resumes. On resume the state is
restored and the journal's E-steps are replayed over the partitions (each E-step is a
deterministic function of the parameters, the starts and the previous state), which rebuilds the
state bit for bit at the cost of fewer than :data:`STATE_EVERY` E-steps: a resume makes progress
however often the fit is killed. A guide whose state is not an array (a custom guide's object)
writes no state file: its resume replays every E-step of the run.

A checkpoint records a fingerprint of the fit (the model's settings, the data's symbol counts,
the SHA-256 of its coded sequences where they pass through the fitting process, the partitions,
the version of ldhmm): a directory holding another fit's checkpoint is refused in one line
naming the one field (the one setting) that differs. The directory is locked while the fit runs
(:mod:`ldhmm.data.directory_lock`, ``DIR/.lock``): a second fit on it is refused in one line.

Reading trusts nothing (:func:`ldhmm.data.npz_archives.read_stored_npz`: a regular file, members
stored, each member's header checked before its data is read; then every array's key, shape,
dtype and values against the fit that resumes: concentrations finite and > 0, log-probabilities
<= 0 and never NaN, counts finite and >= 0, the fit's own float dtype). Every refusal is one
:class:`CheckpointError` line naming the file and the array or field, and how to start over:
``--force`` (the command line's, which :func:`discard_checkpoint`\\ s it) or another directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import re
import weakref
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from ..data.directory_lock import acquire, release
from ..data.npz_archives import read_stored_npz
from ..data.terminal_text import shown
from .monitor import ConvergenceReport
from .parameters import VariantParameters
from .state_store import CHECKPOINT_ARRAYS, StateFileError, read_states, write_npz, write_states

__all__ = [
    "FitCheckpoint",
    "RunRecord",
    "CheckpointError",
    "CHECKPOINT_FILE",
    "STATE_EVERY",
    "START_OVER",
    "describe_checkpoint",
    "discard_checkpoint",
]

CHECKPOINT_FILE = "checkpoint.npz"
#: EM iterations between two state files of the run in progress: a resume replays fewer E-steps.
STATE_EVERY = 4
#: What every refusal of a checkpoint says to do.
START_OVER = "start over with --force (it discards the checkpoint) or use another --checkpoint directory"
_FORMAT = 2
_DICTS = ("prior", "posterior", "log_point")
_STATE_FILE = re.compile(r"checkpoint\.state\.r(\d+)\.i(\d+)\.npz")
_PARAMS_KEY = re.compile(r"run(\d+)/(params|sent\d+)/(prior|posterior|log_point)/(\w+)")
#: the largest meta record read (its JSON: settings, histories, the journal's starts)
_MAX_META_BYTES = 64 << 20


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: one line naming the file and what is wrong, and how
    to start over (:data:`START_OVER`)."""


def _version() -> str:
    try:
        return importlib.metadata.version("ldhmm")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def _params_arrays(prefix: str, params: VariantParameters) -> dict:
    return {
        f"{prefix}/{d}/{g}": t.detach().cpu().numpy() for d in _DICTS for g, t in getattr(params, d).items()
    }


def _float_member(key: str, shape: tuple, dtype) -> str | None:
    """The claim of a checkpoint member, checked before its data is read."""
    if key == "meta":
        if dtype != np.uint8 or len(shape) != 1 or shape[0] > _MAX_META_BYTES:
            return f"expected at most {_MAX_META_BYTES} bytes of JSON, got shape {shape} of {dtype}"
        return None
    if not _PARAMS_KEY.fullmatch(key):
        return "not an array of an ldhmm checkpoint"
    if dtype not in (np.float32, np.float64):
        return f"holds {dtype} values; a checkpoint's arrays are float64 (float32 for a float32 fit)"
    if len(shape) > 3:
        return f"has {len(shape)} dimensions"
    return None


def _check_values(where: str, key: str, array: np.ndarray, kind: str) -> None:
    """``kind``: ``"concentration"`` (finite, > 0) or ``"log_probability"`` (no NaN, no +inf,
    <= 0)."""
    problem = None
    if np.isnan(array).any():
        problem = "holds NaN"
    elif kind == "log_probability":
        if np.isposinf(array).any() or (array > 1e-9).any():
            problem = "holds a log-probability above 0"
    elif not np.isfinite(array).all():
        problem = "holds an infinite value"
    elif kind == "concentration" and (array <= 0).any():
        problem = f"holds a concentration <= 0 ({float(array.min()):g})"
    if problem:
        raise CheckpointError(f"checkpoint {where}: array '{key}' {problem}: {START_OVER}")


class RunRecord:
    """One run of the fit as the checkpoint holds it.

    Attributes
    ----------
    done : bool
    history, verdicts : list
        The stopping rule's (:class:`ldhmm.inference.monitor.ConvergenceMonitor`).
    e_history : list of float
    trace : list of (str, float)
    capped : bool
    params : VariantParameters or None
        After the last M-step (a finished run: its result).
    journal : list of (VariantParameters, tuple)
        What each E-step of a run in progress since its state file was sent: parameters and starts.
    state_file : str or None
        The name of the run's state file (in the checkpoint's directory), or None.
    state_after : int
        The EM iterations whose E-steps the state file follows (0: none, the journal starts at
        the run's first E-step).
    report : ConvergenceReport or None
        A finished run's.
    """

    def __init__(self):
        self.done = False
        self.history: list = []
        self.verdicts: list = []
        self.e_history: list = []
        self.trace: list = []
        self.capped = False
        self.params = None
        self.journal: list = []
        self.state_file: str | None = None
        self.state_after = 0
        self.report = None
        self._stored: dict | None = None  # read, not yet checked against the fit: prefix -> arrays
        self._starts: list = []
        self._has_params = False

    @property
    def n_iter(self) -> int:
        return len(self.history)


class FitCheckpoint:
    """The checkpoint of one fit in ``directory`` (created and locked; an existing one is read).

    Parameters
    ----------
    directory : str or Path
    fingerprint : dict
        JSON-able: what makes two fits the same fit (settings, data). A checkpoint with
        another fingerprint is a :class:`CheckpointError` naming the first difference.
    sharing : ParameterSharing
        The parameters' sharing (not stored: the model's).

    Raises
    ------
    ldhmm.data.directory_lock.DirectoryLockedError
        Another process fits in ``directory``.
    CheckpointError
        ``directory`` is not one, or holds a checkpoint of another fit or an unreadable one.
    """

    def __init__(self, directory, fingerprint: dict, sharing):
        self.directory = Path(directory)
        self.path = self.directory / CHECKPOINT_FILE
        self.fingerprint = json.loads(json.dumps({**fingerprint, "ldhmm_version": _version()}))
        self.sharing = sharing
        self.runs: list[RunRecord] = []
        self._next = 0
        where = shown(self.directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointError(f"checkpoint {where}: not a directory; use another --checkpoint directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(f"checkpoint {where}: cannot create it ({err.strerror})") from None
        key, _ = acquire(self.directory, "use another --checkpoint directory")
        self._unlock = weakref.finalize(self, release, key)
        try:
            if os.path.lexists(self.path):
                self._read()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the directory's lock (also done when the checkpoint is garbage-collected)."""
        self._unlock()

    @property
    def resumed(self) -> bool:
        """Whether a stored checkpoint was read."""
        return bool(self.runs)

    def next_run(self, start: VariantParameters | None = None) -> RunRecord:
        """The record of the fit's next run: the stored one (finished, or to resume), or a new one.

        ``start``: the run's starting parameters, the template every stored array of the run
        is checked against (keys, shapes, dtype; values: :class:`CheckpointError`)."""
        index = self._next
        self._next += 1
        if index < len(self.runs):
            run = self.runs[index]
            if run._stored is not None:
                self._restore(index, run, start)
            return run
        if index > len(self.runs):  # pragma: no cover - runs are taken in order
            raise RuntimeError("checkpoint runs taken out of order")
        self.runs.append(RunRecord())
        return self.runs[index]

    def save(self) -> None:
        """Write every run atomically (the finished ones' results, the current one's state), then
        remove the state files no run names."""
        arrays, runs = {}, []
        for r, run in enumerate(self.runs):
            runs.append(
                {
                    "done": run.done,
                    "history": run.history,
                    "verdicts": run.verdicts,
                    "e_history": run.e_history,
                    "trace": [list(t) for t in run.trace],
                    "capped": bool(run.capped),
                    "starts": [list(starts) for _, starts in run.journal],
                    "report": asdict(run.report) if run.report is not None else None,
                    "has_params": run.params is not None,
                    "state_file": run.state_file,
                    "state_after": run.state_after,
                }
            )
            if run.params is not None:
                arrays.update(_params_arrays(f"run{r}/params", run.params))
            for k, (params, _) in enumerate(run.journal):
                arrays.update(_params_arrays(f"run{r}/sent{k}", params))
        meta = {"format": _FORMAT, "fingerprint": self.fingerprint, "runs": runs}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        write_npz(self.path, arrays)
        named = {run.state_file for run in self.runs if run.state_file}
        _remove_state_files(self.directory, keep=named)

    def save_state(self, run: RunRecord, parts: list, n_iter: int) -> bool:
        """Write ``run``'s per-sequence state after EM iteration ``n_iter`` (``parts``: each
        partition's :meth:`ldhmm.inference.distributed.workers.PartitionWorker.state_arrays`) to
        a new state file (:func:`ldhmm.inference.state_store.write_states`) and empty its journal;
        :meth:`save` then names it. False, writing nothing, where a partition has no state as arrays."""
        if not parts or any(part is None for part in parts):
            return False
        index = self.runs.index(run)
        name = f"checkpoint.state.r{index}.i{n_iter}.npz"
        write_states(self.directory / name, parts, run.params.n_states, self._state_owner(index, n_iter))
        run.state_file, run.state_after, run.journal = name, int(n_iter), []
        return True

    def state_parts(self, run: RunRecord, start: VariantParameters, n_partitions: int) -> list:
        """The per-partition state of ``run``'s state file, checked
        (:func:`ldhmm.inference.state_store.read_states`; a state file of before the store, without
        a manifest, too): one list of per-bucket dicts of arrays per partition, for
        :meth:`ldhmm.inference.distributed.workers.PartitionWorker.set_state_arrays`."""
        path = self.directory / run.state_file
        try:
            return read_states(
                path,
                what="checkpoint state file",
                n_states=start.n_states,
                owner=self._state_owner(self.runs.index(run), run.state_after),
                start_over=START_OVER,
                required=CHECKPOINT_ARRAYS,
                dtype=_numpy_dtype(start),
                n_partitions=n_partitions,
                legacy=("checkpoint",),
                follow=False,
            )
        except FileNotFoundError:
            raise CheckpointError(
                f"checkpoint {shown(self.path)} names the state file {shown(path)}, which is missing: "
                f"{START_OVER}"
            ) from None
        except StateFileError as err:
            raise CheckpointError(str(err)) from None

    def _state_owner(self, index: int, n_iter: int) -> dict:
        """What a state file of this checkpoint belongs to: the fit (a hash of its fingerprint),
        the run and the EM iteration."""
        fit = hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True).encode()).hexdigest()[:16]
        return {"fit": fit, "run": index, "after": int(n_iter)}

    def refusal(self, what: str) -> CheckpointError:
        """A :class:`CheckpointError` about this checkpoint: ``what`` is wrong, and how to start over."""
        return CheckpointError(f"checkpoint {shown(self.path)}: {what}: {START_OVER}")

    def _claimed_shape(self, key: str, shape: tuple, dtype) -> str | None:
        """A member's claim (:func:`_float_member`) and, for a parameter, its shape against the
        fit's K and V (V where the settings name it: ``n_symbols``), before its data is read: a
        member claiming gigabytes is refused at its header."""
        problem = _float_member(key, shape, dtype)
        match = _PARAMS_KEY.fullmatch(key)
        if problem or match is None:
            return problem
        config = self.fingerprint.get("config", {})
        K, V = config.get("n_states"), config.get("n_symbols")
        if not isinstance(K, int):
            return None
        group = match.group(4)
        want = {"pi": (K,), "A": (K, K)}.get(group)
        if want is None and isinstance(V, int):
            want = (K, V)
        if want is not None and tuple(shape) != want:
            return f"claims shape {tuple(shape)}; the fit's {group} is {want}"
        return None

    def _read(self) -> None:
        try:
            arrays = read_stored_npz(self.path, "checkpoint", self._claimed_shape)
        except ValueError as err:
            raise CheckpointError(f"checkpoint {err}: {START_OVER}") from None
        try:
            meta = json.loads(arrays.pop("meta").tobytes().decode())
        except KeyError:
            raise self.refusal("no array 'meta' (not an ldhmm checkpoint)") from None
        except (UnicodeDecodeError, ValueError) as err:
            raise self.refusal(f"array 'meta' is not JSON ({err})") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else None
            raise self.refusal(f"format {got!r}, this ldhmm reads {_FORMAT}")
        if not isinstance(meta.get("fingerprint"), dict):
            raise self.refusal("field 'fingerprint' missing or not a record")
        key, there, here = _first_difference(meta["fingerprint"], self.fingerprint)
        if key is not None:
            raise CheckpointError(
                f"checkpoint {shown(self.directory)} holds another fit ({shown(key)}: {shown(repr(there))} "
                f"there, {here!r} here): {START_OVER}"
            )
        runs = meta.get("runs")
        if not isinstance(runs, list):
            raise self.refusal("field 'runs' missing or not a list")
        K = int(self.fingerprint.get("config", {}).get("n_states") or 0)
        for name, array in arrays.items():
            match = _PARAMS_KEY.fullmatch(name)
            if match is None:
                raise self.refusal(f"array '{shown(name)}' is not a parameter of a run")
            if K and (array.ndim == 0 or array.shape[0] != K):
                raise self.refusal(f"array '{name}' of shape {array.shape}: the fit has K = {K} states")
            kind = "log_probability" if match.group(3) == "log_point" else "concentration"
            _check_values(shown(self.path), name, array, kind)  # before any work: shapes come with the fit
        for r, entry in enumerate(runs):
            try:
                run = _run_record(entry)
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise self.refusal(
                    f"field 'runs[{r}]' is not as ldhmm writes it ({type(err).__name__})"
                ) from None
            prefix = f"run{r}/"
            run._stored = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            if run.state_file is not None and (
                _STATE_FILE.fullmatch(run.state_file) is None
                or int(_STATE_FILE.fullmatch(run.state_file).group(1)) != r
            ):
                raise self.refusal(f"field 'runs[{r}].state_file' is not a state file's name")
            self.runs.append(run)
        stray = {k.split("/")[0] for k in arrays} - {f"run{r}" for r in range(len(runs))}
        if stray:
            raise self.refusal(f"arrays of {sorted(stray)[0]}, a run the checkpoint does not list")

    def _restore(self, index: int, run: RunRecord, start: VariantParameters | None) -> None:
        """``run``'s stored arrays checked against ``start`` and made parameters."""
        stored, run._stored = run._stored, None
        prefixes = (["params"] if run._has_params else []) + [f"sent{k}" for k in range(len(run._starts))]
        made = {}
        for prefix in prefixes:
            made[prefix] = self._params(stored, f"run{index}/", prefix, start)
        extra = {k.split("/")[0] for k in stored} - set(prefixes)
        if extra:
            raise self.refusal(f"array 'run{index}/{sorted(extra)[0]}/...' is not one the run lists")
        run.params = made.get("params")
        run.journal = [(made[f"sent{k}"], tuple(s)) for k, s in enumerate(run._starts)]

    def _params(self, stored: dict, run_prefix: str, prefix: str, start) -> VariantParameters:
        """The parameters ``prefix`` of a run's stored arrays, each checked (against ``start``
        where given: the same groups, shapes and dtype)."""
        where = shown(self.path)
        parts = {d: {} for d in _DICTS}
        for key, value in stored.items():
            if key.split("/")[0] == prefix:
                _, d, g = key.split("/")
                parts[d][g] = value
        for d in _DICTS:
            want = getattr(start, d) if start is not None else None
            if want is not None and set(parts[d]) != set(want):
                wanted, got = sorted(want), sorted(parts[d])
                raise self.refusal(f"the {d} groups of '{run_prefix}{prefix}' are {got}, the fit's {wanted}")
            for g, value in parts[d].items():
                key = f"{run_prefix}{prefix}/{d}/{g}"
                if want is not None:
                    shape, dtype = tuple(want[g].shape), want[g].detach().cpu().numpy().dtype
                    if value.shape != shape or value.dtype != dtype:
                        raise self.refusal(
                            f"array '{key}' of shape {value.shape} and dtype {value.dtype}, "
                            f"the fit's {shape} of {dtype}"
                        )
                _check_values(where, key, value, "log_probability" if d == "log_point" else "concentration")
                parts[d][g] = torch.from_numpy(np.array(value))
        # a run's own sharing where its start says it (the database-level HMM's runs are point
        # estimates of every group), else the model's
        sharing = start.sharing if start is not None else self.sharing
        return VariantParameters(sharing, parts["prior"], parts["posterior"], parts["log_point"])


def _numpy_dtype(params: VariantParameters):
    """The numpy dtype of ``params``' tensors."""
    return torch.empty((), dtype=params.dtype).numpy().dtype


def _finite_floats(values) -> list:
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise ValueError("a non-finite value")
    return out


def _run_record(entry: dict) -> RunRecord:
    """A run of the meta record, its fields checked (a ``KeyError``, ``TypeError`` or
    ``ValueError`` where one is not as written)."""
    run = RunRecord()
    if not isinstance(entry["done"], bool) or not isinstance(entry["capped"], bool):
        raise TypeError("done, capped")
    run.done, run.capped = entry["done"], entry["capped"]
    run.history = _finite_floats(entry["history"])
    run.verdicts = [str(v) for v in entry["verdicts"]]
    run.e_history = _finite_floats(entry["e_history"])
    if len(run.verdicts) != len(run.history) or len(run.e_history) != len(run.history):
        raise ValueError("verdicts, e_history")
    run.trace = [(str(step), float(value)) for step, value in entry["trace"]]
    # the trace is each iteration's E-step ELBO and M-step ELBO, as the driver records them
    if run.trace != [pair for e, m in zip(run.e_history, run.history) for pair in (("E", e), ("M", m))]:
        raise ValueError("trace")
    run._starts = [[str(s) for s in starts] for starts in entry["starts"]]
    run._has_params = bool(entry["has_params"])
    run.report = ConvergenceReport(**entry["report"]) if entry["report"] is not None else None
    run.state_file = entry["state_file"] if entry["state_file"] is None else str(entry["state_file"])
    run.state_after = int(entry["state_after"])
    if not 0 <= run.state_after <= len(run.history) or (run.state_file is None) != (run.state_after == 0):
        raise ValueError("state_after")
    if run.history and not run._has_params or run.done and run.report is None:
        raise ValueError("has_params")
    if run.done and (not run.history or run.report.n_iter != len(run.history)):
        raise ValueError("report")
    if not run.done and run.history and len(run._starts) != len(run.history) - run.state_after:
        raise ValueError("starts")
    return run


def _remove_state_files(directory: Path, keep: set) -> None:
    """Remove the state files of ``directory`` (the names :meth:`FitCheckpoint.save_state`
    writes, nothing else) except those in ``keep``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if _STATE_FILE.fullmatch(name) and name not in keep:
            try:
                os.unlink(directory / name)
            except OSError:
                pass


def discard_checkpoint(directory) -> None:
    """Remove the checkpoint files of ``directory`` (``checkpoint.npz`` and its state files:
    nothing else), to start a fit over there (``ldhmm fit --checkpoint DIR --force``)."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    _remove_state_files(directory, keep=set())
    try:
        os.unlink(directory / CHECKPOINT_FILE)
    except FileNotFoundError:
        pass


def describe_checkpoint(directory) -> str:
    """Where the checkpoint in ``directory`` stands, in words (``"no checkpoint yet"`` without one)."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        runs = json.loads(read_stored_npz(path, "checkpoint", _float_member)["meta"].tobytes().decode())[
            "runs"
        ]
        last = runs[-1] if runs else None
        state = (
            None
            if last is None
            else ("finished" if last["done"] else f"after EM iteration {len(last['history'])}")
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "no checkpoint yet"
    if last is None:
        return "no EM iteration yet"
    return f"run {len(runs)} of the fit (its restarts and seeding fit in order), {state}"


def _first_difference(stored: dict, current: dict, prefix: str = "") -> tuple:
    """(the dotted name of the first field where two fingerprints differ, its value in each), or
    (None, None, None): a nested dict (the settings) is named down to the one setting that differs."""
    for key in sorted(set(stored) | set(current)):
        a, b = stored.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            return _first_difference(a, b, f"{prefix}{key}.")
        return f"{prefix}{key}", a, b
    return None, None, None
