"""The EM driver's checkpoint: a fit that was stopped resumes where it stopped, with the numbers of
an uninterrupted fit.

One file, ``DIR/checkpoint.npz`` (numpy's NPZ, read without pickle), rewritten atomically
(:func:`ldhmm.data.atomic.write_atomically`) after every EM iteration. It holds, for each run of
the fit in the order the fit runs them (the restarts, the PF fit that seeds a mean-field guide,
the fit from ``init_params``):

- a finished run: its result (final parameters, ELBO histories, trace, stopping report);
- the run in progress: the rule's history and verdicts, the parameters after its last M-step,
  and the parameters and starts every E-step of the run was sent (the run's *journal*).

The per-sequence variational state is not written: on resume, the journal's E-steps are
replayed over the partitions (each E-step is a deterministic function of the parameters, the
starts and the previous state), which rebuilds it bit for bit at the cost of those E-steps
(no M-step). The journal grows by the parameters (O(K V) numbers) per iteration.

A checkpoint records a fingerprint of the fit (the model's settings, the data's symbol counts,
the SHA-256 of its coded sequences where they pass through the fitting process, the partitions):
a directory holding another fit's checkpoint is refused in one line naming the one field (the one
setting) that differs.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from ..data.atomic import write_atomically
from .monitor import ConvergenceReport
from .parameters import VariantParameters

__all__ = ["FitCheckpoint", "RunRecord", "CHECKPOINT_FILE", "describe_checkpoint"]

CHECKPOINT_FILE = "checkpoint.npz"
_FORMAT = 1
_DICTS = ("prior", "posterior", "log_point")


def _params_arrays(prefix: str, params: VariantParameters) -> dict:
    return {
        f"{prefix}/{d}/{g}": t.detach().cpu().numpy() for d in _DICTS for g, t in getattr(params, d).items()
    }


def _params_from(arrays: dict, prefix: str, sharing) -> VariantParameters:
    parts = {d: {} for d in _DICTS}
    for key, value in arrays.items():
        if key.startswith(prefix + "/"):
            d, g = key[len(prefix) + 1 :].split("/")
            parts[d][g] = torch.from_numpy(np.array(value))
    return VariantParameters(sharing, parts["prior"], parts["posterior"], parts["log_point"])


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
        What each E-step of a run in progress was sent: parameters and starts.
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
        self.report = None

    @property
    def n_iter(self) -> int:
        return len(self.history)


class FitCheckpoint:
    """The checkpoint of one fit in ``directory`` (created; an existing one is read).

    Parameters
    ----------
    directory : str or Path
    fingerprint : dict
        JSON-able: what makes two fits the same fit (settings, data). A checkpoint with
        another fingerprint is a ValueError naming the first difference.
    sharing : ParameterSharing
        The parameters' sharing (not stored: the model's).
    """

    def __init__(self, directory, fingerprint: dict, sharing):
        self.directory = Path(directory)
        self.path = self.directory / CHECKPOINT_FILE
        self.fingerprint = json.loads(json.dumps(fingerprint))
        self.sharing = sharing
        self.runs: list[RunRecord] = []
        self._next = 0
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"checkpoint {self.directory}: not a directory")
        if self.path.exists():
            self._read()
        else:
            self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def resumed(self) -> bool:
        """Whether a stored checkpoint was read."""
        return bool(self.runs)

    def next_run(self) -> RunRecord:
        """The record of the fit's next run: the stored one (finished, or to resume), or a new one."""
        index = self._next
        self._next += 1
        if index < len(self.runs):
            return self.runs[index]
        if index > len(self.runs):  # pragma: no cover - runs are taken in order
            raise RuntimeError("checkpoint runs taken out of order")
        self.runs.append(RunRecord())
        return self.runs[index]

    def save(self) -> None:
        """Write every run atomically (the finished ones' results, the current one's state)."""
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
                }
            )
            if run.params is not None:
                arrays.update(_params_arrays(f"run{r}/params", run.params))
            for k, (params, _) in enumerate(run.journal):
                arrays.update(_params_arrays(f"run{r}/sent{k}", params))
        meta = {"format": _FORMAT, "fingerprint": self.fingerprint, "runs": runs}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)

        def write(f):
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            f.write(buffer.getvalue())

        write_atomically(self.path, write, binary=True)

    def _read(self) -> None:
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            meta = json.loads(arrays.pop("meta").tobytes().decode())
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"checkpoint {self.path}: unreadable ({type(err).__name__}: {err})") from err
        if meta.get("format") != _FORMAT:
            raise ValueError(f"checkpoint {self.path}: format {meta.get('format')!r}, expected {_FORMAT}")
        key, there, here = _first_difference(meta["fingerprint"], self.fingerprint)
        if key is not None:
            raise ValueError(
                f"checkpoint {self.directory} holds another fit ({key}: {there!r} there, {here!r} here): "
                "use another directory or remove it"
            )
        for r, entry in enumerate(meta["runs"]):
            run = RunRecord()
            run.done = bool(entry["done"])
            run.history, run.verdicts = list(entry["history"]), list(entry["verdicts"])
            run.e_history = list(entry["e_history"])
            run.trace = [(step, value) for step, value in entry["trace"]]
            run.capped = bool(entry["capped"])
            if entry["has_params"]:
                run.params = _params_from(arrays, f"run{r}/params", self.sharing)
            run.journal = [
                (_params_from(arrays, f"run{r}/sent{k}", self.sharing), tuple(starts))
                for k, starts in enumerate(entry["starts"])
            ]
            run.report = ConvergenceReport(**entry["report"]) if entry["report"] is not None else None
            self.runs.append(run)


def describe_checkpoint(directory) -> str:
    """Where the checkpoint in ``directory`` stands, in words (``"no checkpoint yet"`` without one)."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        with np.load(path, allow_pickle=False) as npz:
            runs = json.loads(npz["meta"].tobytes().decode())["runs"]
    except (OSError, ValueError, KeyError):
        return "no checkpoint yet"
    if not runs:
        return "no EM iteration yet"
    last = runs[-1]
    state = "finished" if last["done"] else f"after EM iteration {len(last['history'])}"
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
