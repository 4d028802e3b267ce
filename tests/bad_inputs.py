"""Every bad input the project tries, as data: what it is and what it gets.

``tests/test_bad_inputs.py`` runs each case and checks its outcome (exit code 1 or 2, exactly
one line on stderr, no traceback, no output file); ``python tests/bad_inputs.py --write``
regenerates ``docs/bad-inputs.md`` from the same cases, and the test checks that the page is up
to date. Interruptions are tried in ``tests/test_interrupted_runs.py``; their rows say which
test tries them.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import inspect
import io
import json
import math
import os
import re
import socket
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import ldhmm
from ldhmm.cli import main
from ldhmm.data import load_text, write_partitioned

DOC = Path(__file__).resolve().parents[1] / "docs" / "bad-inputs.md"


@dataclass
class Case:
    category: str
    what: str
    argv: list = field(default_factory=list)  # ldhmm arguments; "{d}" is the case directory
    python: object = None  # or a callable(d) that must raise ValueError
    tried_by: str = ""  # for rows checked elsewhere


SYMBOLS = "home news sport tech weather shop".split()


def make_files(d: Path) -> None:
    """The files the cases use, in directory ``d``."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(SYMBOLS, size=int(rng.integers(3, 9)))) for _ in range(40)]
    (d / "train.txt").write_text("\n".join(lines) + "\n")
    (d / "unseen.txt").write_text("home news\nhome casino\n")
    # --overwrite targets that hold what no data set of ours lists: a foreign dataset.json
    # beside a user's file, and a real export with a user's notes added
    (d / "foreign").mkdir()
    (d / "foreign" / "dataset.json").write_text("{}")
    (d / "foreign" / "thesis.tex").write_text("keep me")
    write_partitioned(load_text(d / "train.txt"), d / "exported", n_files=2)
    (d / "exported" / "my-notes.txt").write_text("keep me")
    (d / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (d / "empty.txt").write_text("# only a comment\n\n")
    (d / "control.txt").write_text("home news\nhome \x07 news\n")
    (d / "events.csv").write_text("session,page\ns1,home\ns1,news\ns2,shop\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["fit", str(d / "train.txt"), "--states", "2", "--restarts", "1", "--max-iter", "2",
                     "--out", str(d / "model.json"), "--quiet"])  # fmt: skip
    assert code == 0
    doc = json.loads((d / "model.json").read_text())
    variants = {
        "nan-prior": (("prior", "A"), [[math.nan, 1.0], [1.0, 1.0]]),
        "negative-prior": (("prior", "pi"), [-1.0, 2.0]),
        "wrong-shape": (("prior", "B"), [[1.0, 2.0], [3.0, 4.0]]),
        "string-prior": (("prior", "pi"), ["1.0", "2.0"]),
        "newer-version": (("version",), 3),
        "unknown-class": (("class",), "Pickle"),
        "bad-config": (("config", "e_step_max_iter"), 0),
        "bad-vocabulary": (("vocabulary",), ["a", "a", "b", "c", "d", "e"]),
    }
    for name, (path, value) in variants.items():
        bad = json.loads(json.dumps(doc))
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        (d / f"{name}.json").write_text(json.dumps(bad))
    (d / "not-json.json").write_text("{this is not json")
    _hostile_files(d, doc)
    # a large-vocabulary model whose NPZ side file was not copied along
    side = json.loads(json.dumps(doc))
    side["arrays"], side["prior"]["B"] = "missing-side-file.json.npz", {"npz": "prior.B"}
    (d / "missing-side-file.json").write_text(json.dumps(side))
    # a model of the SVI route: its file names the factory that rebuilds it, never run unasked
    pyro_doc = {"format": "ldhmm", "version": 2, "class": "PyroSequenceModel", "factory": "ldhmm.models.sticky:sticky_ldhmm",
                "config": {"n_states": 2, "n_symbols": 6}, "params": {"kappa": 1.0}}  # fmt: skip
    (d / "svi-variant.json").write_text(json.dumps(pyro_doc))
    _round_three_files(d)


#: what the cases hold open while they run: a lock held as another run would, a silent server
_HELD_OPEN: list = []


def _round_three_files(d: Path) -> None:
    """Issue 49's inputs: event logs and checkpoints a careless user or an attacker would give."""
    (d / "events-escape.csv").write_text("session,page\ns1,home\ns1,news\x1b[31m\n")
    (d / "unk.txt").write_text("home news\nhome <unk> news\n")
    (d / "offsets.csv").write_text(
        "session,page,time\ns1,home,2026-01-01T10:00:00+01:00\ns1,news,2026-01-01T10:05:00\n"
    )
    import pandas as pd

    pd.DataFrame({"session": ["s1", "s1"], "page": [["home", "news"], ["shop"]]}).to_parquet(
        d / "nested.parquet"
    )
    pd.DataFrame({"session": [["s1"], ["s2"]], "page": ["home", "news"]}).to_parquet(d / "list-ids.parquet")
    fit = ["fit", str(d / "train.txt"), "--states", "2", "--restarts", "1", "--max-iter", "2", "--quiet"]
    for name in ("ck-nan", "ck-int8", "ck-bomb"):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main([*fit, "--out", str(d / f"{name}.json"), "--checkpoint", str(d / name)]) == 0
        (d / f"{name}.json").unlink()
        with np.load(d / name / "checkpoint.npz") as npz:
            arrays = {k: npz[k] for k in npz.files}
        key = next(k for k in arrays if k.endswith("/prior/A"))
        if name == "ck-nan":
            arrays[key] = np.full_like(arrays[key], math.nan)
            np.savez(d / name / "checkpoint.npz", **arrays)
        elif name == "ck-int8":
            arrays[key] = arrays[key].astype(np.int8)
            np.savez(d / name / "checkpoint.npz", **arrays)
        else:  # 80 MB of zeros in 80 KB
            arrays[key] = np.zeros((2, 10_000_000))
            np.savez_compressed(d / name / "checkpoint.npz", **arrays)
    (d / "ck-fifo").mkdir()
    os.mkfifo(d / "ck-fifo" / "checkpoint.npz")
    (d / "ck-busy").mkdir()
    fd = os.open(d / "ck-busy" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, b"4242\nldhmm fit other.txt --checkpoint ck-busy\n", 0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    (d / "silent-address").write_text(f"tcp://127.0.0.1:{server.getsockname()[1]}")
    _HELD_OPEN.extend([fd, server])


def _hostile_files(d: Path, doc: dict) -> None:
    """Special files, strict JSON, models that give sequences probability 0, claimed sizes."""
    raw = bytearray(gzip.compress("\n".join(["home news sport"] * 2000).encode()))
    raw[30:60] = b"\xff" * 30  # a damaged deflate stream
    (d / "corrupt.txt.gz").write_bytes(bytes(raw))
    (d / "bomb.txt.gz").write_bytes(gzip.compress(b"home news " * 1_000_000))  # 10 MB of text in 20 KB
    os.mkfifo(d / "fifo.json")
    os.mkfifo(d / "fifo.txt")
    (d / "zero.json").symlink_to("/dev/zero")
    (d / "directory.json").mkdir()
    text = json.dumps(doc)
    (d / "duplicate-key.json").write_text(text[:-1] + ', "prior": {}}')
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    # a side file that is a link from the model's directory to a file elsewhere
    (d / "models").mkdir()
    np.savez(d / "elsewhere.npz", **{"prior.B": np.ones((2, 6))})
    (d / "models" / "linked.npz").symlink_to(d / "elsewhere.npz")
    linked = json.loads(text)
    linked["arrays"], linked["prior"]["B"] = "linked.npz", {"npz": "prior.B"}
    (d / "models" / "linked.json").write_text(json.dumps(linked))
    # a side file whose member claims 2 x 50,000,000 values in 16 KB (a zip bomb)
    bomb = json.loads(text)
    bomb["config"]["n_symbols"], bomb["vocabulary"] = 50_000_000, None
    bomb["arrays"], bomb["prior"]["B"] = "bomb.npz", {"npz": "prior.B"}
    (d / "bomb.json").write_text(json.dumps(bomb))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (2, 50_000_000)}
    )
    with zipfile.ZipFile(d / "bomb.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("prior.B.npy", "w", force_zip64=True) as f:
            f.write(header.getvalue() + bytes(1 << 24))
    # point estimates with -inf entries: a symbol no state emits; a symbol no state path reaches
    point_B = {
        **json.loads(text),
        "class": "VariantHMM",
        "sharing": {**doc["sharing"], "B": "point"},
        "log_point": {"B": [[0.0] + [-math.inf] * 5, [-math.inf, 0.0] + [-math.inf] * 4]},
    }
    point_B["prior"] = {g: v for g, v in doc["prior"].items() if g != "B"}
    settings = inspect.signature(ldhmm.VariantHMM).parameters  # LDHMM's own (optimizer, ...) go
    point_B["config"] = {k: v for k, v in doc["config"].items() if k in settings}
    (d / "point-B.json").write_text(json.dumps(point_B, allow_nan=True))
    alternating = {
        **point_B,
        "sharing": {**doc["sharing"], "pi": "point", "A": "point", "B": "point"},
        "prior": {},
        "log_point": {
            **point_B["log_point"],
            "pi": [0.0, -math.inf],
            "A": [[-math.inf, 0.0], [0.0, -math.inf]],
        },
    }
    (d / "all-point.json").write_text(json.dumps(alternating, allow_nan=True))
    (d / "emits.txt").write_text("home news home\nhome sport\n")
    (d / "paths.txt").write_text("home news home\nhome home\n")


def _start_of_another_k(d):
    seqs = [np.array([0, 1, 2, 1]), np.array([2, 1, 0])] * 5
    two = ldhmm.LDHMM(2, seed=0, max_iter=2).fit(seqs)
    ldhmm.LDHMM(3, max_iter=2).fit(seqs, init_params=two.params_)


def _huge_symbol_id(d):
    ldhmm.compare("HMM", [np.array([0, 1, 2**41])], out=d / "never")


CASES = [
    # data files
    Case("data file", "a binary file", ["score", "{d}/model.json", "{d}/blob.bin", "--out", "{d}/o.csv"]),
    Case("data file", "a file with no sequences", ["fit", "{d}/empty.txt", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a control character in a line", ["fit", "{d}/control.txt", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a CSV event log without its columns", ["fit", "{d}/events.csv", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a CSV event log with a missing column",
         ["fit", "{d}/events.csv", "--sequence-col", "user", "--event-col", "page", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "no such file", ["fit", "{d}/nope.txt", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a FIFO", ["fit", "{d}/fifo.txt", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "corrupt gzip data", ["fit", "{d}/corrupt.txt.gz", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a gzip file whose text inflates past --max-memory (gzip bomb)",
         ["fit", "{d}/bomb.txt.gz", "--states", "2", "--max-memory", "64M", "--out", "{d}/o.json"]),
    Case("data file", "a symbol the model has not seen", ["score", "{d}/model.json", "{d}/unseen.txt", "--out", "{d}/o.csv"]),
    Case("data file", "a symbol id far beyond the data (Python API)", python=_huge_symbol_id),
    Case("argument", "init_params of a model with another K (Python API)", python=_start_of_another_k),
    Case("argument", "--effort fast", ["fit", "{d}/train.txt", "--states", "2", "--effort", "fast", "--out", "{d}/o.json"]),
    # model files
    Case("model file", "not JSON", ["score", "{d}/not-json.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "NaN in a prior", ["score", "{d}/nan-prior.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a negative concentration", ["score", "{d}/negative-prior.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "an array of the wrong shape", ["score", "{d}/wrong-shape.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "strings where numbers belong", ["score", "{d}/string-prior.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a newer format version", ["score", "{d}/newer-version.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "an unknown class", ["score", "{d}/unknown-class.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a setting out of range", ["score", "{d}/bad-config.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a vocabulary with duplicates", ["score", "{d}/bad-vocabulary.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "its NPZ side file (large arrays) missing", ["score", "{d}/missing-side-file.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a duplicate key", ["score", "{d}/duplicate-key.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "JSON nested 100,000 deep", ["score", "{d}/deep.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a FIFO", ["score", "{d}/fifo.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a link to /dev/zero", ["score", "{d}/zero.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a directory", ["score", "{d}/directory.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "its side file a link to a file outside its directory",
         ["score", "{d}/models/linked.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "a side file claiming 2 x 50,000,000 values in 16 KB (zip bomb)",
         ["score", "{d}/bomb.json", "{d}/train.txt", "--max-memory", "2G", "--out", "{d}/o.csv"]),
    Case("model file", "a point-estimated B that gives a symbol probability 0 in every state (score)",
         ["score", "{d}/point-B.json", "{d}/emits.txt", "--out", "{d}/o.csv"]),
    Case("model file", "point estimates under which no state path emits a sequence (posterior)",
         ["posterior", "{d}/all-point.json", "{d}/paths.txt", "--out", "{d}/o.csv"]),
    Case("model file", "the same (predict, decode; Python API: -inf from score_samples, ImpossibleSequenceError)",
         tried_by="tests/test_impossible.py"),
    Case("model file", "a variant of the SVI route, without --factory", ["score", "{d}/svi-variant.json", "{d}/train.txt", "--out", "{d}/o.csv"]),
    Case("model file", "every field mutated (hypothesis)", tried_by="tests/test_model_files.py"),
    # arguments
    Case("argument", "--states 0", ["compare", "--dataset", "synthetic", "--states", "0", "--out", "{d}/c"]),
    Case("argument", "--folds 0", ["compare", "--dataset", "synthetic", "--folds", "0", "--out", "{d}/c"]),
    Case("argument", "--jobs x", ["compare", "--dataset", "synthetic", "--jobs", "x", "--out", "{d}/c"]),
    Case("argument", "an unknown model name", ["compare", "--dataset", "synthetic", "--models", "FOO", "--out", "{d}/c"]),
    Case("argument", "--model without NAME=", ["compare", "--dataset", "synthetic", "--model", "justaname", "--out", "{d}/c"]),
    Case("argument", "--model whose module does not import",
         ["compare", "--dataset", "synthetic", "--model", "x=no_such_module_xyz:f", "--out", "{d}/c"]),
    Case("argument", "an output file of an unknown kind", ["score", "{d}/model.json", "{d}/train.txt", "--out", "{d}/o.txt"]),
    Case("argument", "--max-memory that is not a size", ["fit", "{d}/train.txt", "--states", "2", "--max-memory", "lots"]),
    Case("argument", "--seed 2**70", ["fit", "{d}/train.txt", "--states", "2", "--seed", str(2**70), "--out", "{d}/o.json"]),
    Case("argument", "--unknown map without --init",
         ["fit", "{d}/train.txt", "--states", "2", "--unknown", "map", "--out", "{d}/o.json"]),
    Case("argument", "--is-samples 1,000,000,000",
         ["score", "{d}/model.json", "{d}/train.txt", "--is-samples", "1000000000", "--max-memory", "2G", "--out", "{d}/o.csv"]),
    Case("argument", "--states and --init disagree",
         ["fit", "{d}/train.txt", "--init", "{d}/model.json", "--states", "5", "--out", "{d}/o.json"]),
    # sizes
    Case("size", "K = 5000 (hinton)", ["hinton", "--dataset", "synthetic", "--states", "5000", "--max-memory", "8G", "--out", "{d}/h"]),
    Case("size", "K = 3000 with --jobs 2 (compare)",
         ["compare", "--dataset", "synthetic", "--states", "3000", "--jobs", "2", "--max-memory", "8G", "--out", "{d}/c"]),
    Case("size", "K = 20000 (fit)", ["fit", "{d}/train.txt", "--states", "20000", "--max-memory", "8G", "--out", "{d}/o.json"]),
    Case("size", "a fit whose ELBO turns NaN", tried_by="tests/test_nonfinite.py"),
    # interruptions
    Case("interruption", "SIGKILL at random moments (compare, classify)", tried_by="tests/test_interrupted_runs.py"),
    Case("interruption", "two runs on the same --out", tried_by="tests/test_interrupted_runs.py"),
    Case("interruption", "Ctrl-C", tried_by="tests/test_interrupted_runs.py"),
    Case("interruption", "Ctrl-C while the command loads", tried_by="tests/test_interrupt_at_start.py"),
    Case("interruption", "a save killed before its rename", tried_by="tests/test_stale_temporaries.py"),
    Case("output", "posterior --out post.csv of a 600-token sequence", tried_by="tests/test_output_round_trip.py"),
    Case("output", "data export --overwrite onto a folder whose dataset.json is not ldhmm's (a thesis beside it)",
         ["data", "export", "{d}/train.txt", "{d}/foreign", "--overwrite", "--quiet"]),
    Case("output", "data export --overwrite onto a data set holding a file it does not list",
         ["data", "export", "{d}/train.txt", "{d}/exported", "--overwrite", "--quiet"]),
    # round three (issue 49): event logs at the door
    Case("data file", "an event name holding a terminal escape (CSV)",
         ["fit", "{d}/events-escape.csv", "--sequence-col", "session", "--event-col", "page", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a real event named `<unk>`", ["fit", "{d}/unk.txt", "--states", "2", "--unknown", "reserve", "--out", "{d}/o.json"]),
    Case("data file", "times with and without a UTC offset",
         ["fit", "{d}/offsets.csv", "--sequence-col", "session", "--event-col", "page", "--time-col", "time", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a Parquet log whose events are lists",
         ["fit", "{d}/nested.parquet", "--sequence-col", "session", "--event-col", "page", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a Parquet log whose sequence ids are lists",
         ["fit", "{d}/list-ids.parquet", "--sequence-col", "session", "--event-col", "page", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a file name holding terminal escapes", ["fit", "{d}/\x1b]0;owned\x07\x1b[2J.txt", "--states", "2", "--out", "{d}/o.json"]),
    Case("data file", "a time in year 9999; times with different UTC offsets", tried_by="tests/test_inputs_at_the_door.py"),
    # checkpoints
    Case("checkpoint", "NaN in a concentration", ["fit", "{d}/train.txt", "--states", "2", "--restarts", "1", "--max-iter", "2", "--checkpoint", "{d}/ck-nan", "--quiet", "--out", "{d}/o.json"]),
    Case("checkpoint", "an int8 array", ["fit", "{d}/train.txt", "--states", "2", "--restarts", "1", "--max-iter", "2", "--checkpoint", "{d}/ck-int8", "--quiet", "--out", "{d}/o.json"]),
    Case("checkpoint", "a compressed member of 2 x 10,000,000 values (zip bomb)",
         ["fit", "{d}/train.txt", "--states", "2", "--restarts", "1", "--max-iter", "2", "--checkpoint", "{d}/ck-bomb", "--quiet", "--out", "{d}/o.json"]),
    Case("checkpoint", "a FIFO as checkpoint.npz", ["fit", "{d}/train.txt", "--states", "2", "--checkpoint", "{d}/ck-fifo", "--quiet", "--out", "{d}/o.json"]),
    Case("checkpoint", "a directory another fit is using", ["fit", "{d}/train.txt", "--states", "2", "--checkpoint", "{d}/ck-busy", "--quiet", "--out", "{d}/o.json"]),
    Case("checkpoint", "another fit's checkpoint, a damaged state file, a fit along K into a directory in use",
         tried_by="tests/test_checkpoint_hostile.py"),
    Case("interruption", "a checkpointed fit killed every 7 E-steps", tried_by="tests/test_checkpoint_hostile.py"),
    # bounded waits
    Case("argument", "--scheduler at a server that never answers",
         ["fit", "{d}/train.txt", "--states", "2", "--backend", "dask", "--scheduler", "{silent}", "--scheduler-timeout", "0.5", "--out", "{d}/o.json"]),
    Case("argument", "credentials in a --scheduler address",
         ["fit", "{d}/train.txt", "--states", "2", "--backend", "dask", "--scheduler", "tcp://admin:hunter2@127.0.0.1:1", "--scheduler-timeout", "0.5", "--out", "{d}/o.json"]),
    Case("argument", "--backend dask --workers 1000", ["fit", "{d}/train.txt", "--states", "2", "--backend", "dask", "--workers", "1000", "--out", "{d}/o.json"]),
    Case("argument", "an S3 end point that never answers; credentials in an s3:// URL", tried_by="tests/test_bounded_waits.py"),
]  # fmt: skip

# what the page says for the rows other tests try
ELSEWHERE = {
    "every field mutated (hypothesis)": "loaded (and scores finitely) or refused with one line naming file and field",
    "a fit whose ELBO turns NaN": "stops: `the total ELBO became nan at EM iteration N (M-step), in group A; the last "
    "finite parameters are kept`",
    "SIGKILL at random moments (compare, classify)": "the rerun resumes to exactly the results of an uninterrupted run; "
    "no truncated task or result file",
    "two runs on the same --out": "the second: one line, `... is in use by another ldhmm run (pid ...)`, exit 1",
    "Ctrl-C": "one line, `interrupted; N of M tasks are saved in OUT: run the same command again to resume (OUT/command.sh): cd DIR && LDHMM_DATA=... ldhmm ...`, "
    "exit 130",
    "Ctrl-C while the command loads": "one line, `ldhmm: interrupted`, exit 130",
    "a save killed before its rename": "its temporary file is removed by the next save of the same file (never a "
    "live writer's)",
    "posterior --out post.csv of a 600-token sequence": "every value, read back equal to the API's in .csv, "
    ".parquet and .pq (score, posterior, predict, decode)",
    "a time in year 9999; times with different UTC offsets": "read and ordered where they belong: a year-9999 time "
    "last (never wrapped around to 1677), times with offsets in UTC",
    "another fit's checkpoint, a damaged state file, a fit along K into a directory in use": "one line naming the "
    "setting, array or directory that differs and how to start over (`--force` or another directory)",
    "a checkpointed fit killed every 7 E-steps": "each resume replays at most 3 E-steps (the state is saved every 4 "
    "iterations) and goes on; the end is the uninterrupted fit, bit for bit",
    "an S3 end point that never answers; credentials in an s3:// URL": "one line naming the URL within a few "
    "timeouts (`LDHMM_NETWORK_TIMEOUT`, default 5 s: `... did not answer within 5 s; LDHMM_NETWORK_TIMEOUT=SECONDS "
    "waits longer`), its credentials shown as `s3://***@bucket`",
    "the same (predict, decode; Python API: -inf from score_samples, ImpossibleSequenceError)": "the same one line "
    "from every command; the API: -inf from `score_samples`, `ImpossibleSequenceError` naming the sequence from the "
    "other methods",
}


def run_case(case: Case, d: Path) -> tuple[int, str]:
    """``(exit code, stderr)`` of a case (exit 1 with the message for a Python case)."""
    if case.python is not None:
        try:
            case.python(d)
        except ValueError as err:
            return 1, f"ValueError: {err}"
        return 0, ""
    silent = (d / "silent-address").read_text() if (d / "silent-address").is_file() else ""
    argv = [a.replace("{d}", str(d)).replace("{silent}", silent) for a in case.argv]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def normalize(text: str, d: Path) -> str:
    """The message with the case directory and machine-dependent numbers replaced."""
    text = text.strip().replace(str(d), "DIR")
    text = re.sub(r"more than the [0-9.]+ [KMGT]?B available", "more than the LIMIT available", text)
    text = re.sub(r"pid \d+", "pid N", text)
    text = re.sub(r"127\.0\.0\.1:\d{3,}", "127.0.0.1:PORT", text)
    text = re.sub(r"this machine has \d+ cores and [0-9.]+ GiB of memory, room for at most \d+",
                  "this machine has N cores and M GiB of memory, room for at most N", text)  # fmt: skip
    text = re.sub(r"use --workers \d+ or fewer", "use --workers N or fewer", text)
    return text


def table(d: Path) -> str:
    rows = ["| kind | bad input | what it gets |", "|---|---|---|"]
    for case in CASES:
        if case.tried_by:
            outcome = f"{ELSEWHERE[case.what]} (tried by `{case.tried_by}`)"
        else:
            code, err = run_case(case, d)
            outcome = f"exit {code}: `{normalize(err, d)}`"
        cell = outcome.replace("|", "\\|")
        rows.append(f"| {case.category} | {case.what} | {cell} |")
    return "\n".join(rows)


def page(d: Path) -> str:
    return (
        "# Bad inputs and what they get\n\n"
        "Generated by `python tests/bad_inputs.py --write` from the cases that "
        "`tests/test_bad_inputs.py` runs (a test fails when this page is out of date). Every "
        "refusal is one line on stderr, exit code 1 (2 for arguments argparse rejects), and "
        "writes no output file. DIR is the directory of the case's files. Beyond these cases, a seeded "
        "fuzzer (`python tests/fuzz_cli.py --cases 300 --seed S`; a quick round in "
        "`tests/test_fuzz_cli.py`) mutates model files field by field, NPZ side files, data files, "
        "path arguments and checkpoints through fit, score, posterior, predict, decode, report and data info, and "
        "checks the exit code, a one-line stderr, finite outputs, `--max-memory` and that nothing is "
        "written outside `--out`.\n\n" + table(d) + "\n"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        make_files(d)
        text = page(d)
    if "--write" in sys.argv:
        DOC.write_text(text)
        print(f"wrote {DOC}")
    else:
        print(text)
