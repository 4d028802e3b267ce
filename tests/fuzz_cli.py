"""A seeded fuzzer of the ``ldhmm`` command line: hostile model files, data files and paths.

Each case is one command (``fit``, ``score``, ``posterior``, ``predict``, ``decode``,
``report``, ``data info``) run in this process through :func:`ldhmm.cli.main` on one mutated
input: a model file changed field by field (types, signs, NaN/inf, huge sizes, wrong shapes,
unicode) or as a file (truncated, bytes flipped, duplicate keys, encodings), its NPZ side file
(truncated, a zip bomb, pickled objects, links), a data file (random bytes, bad UTF-8, huge
lines, NUL bytes, CRLF, BOM, gzip bombs) or a path argument (links in and out of the case
directory, FIFOs, directories, ``/dev/zero``), or a fit's checkpoint (``--checkpoint DIR``:
truncated, flipped, zip bombs, pickles, NaN/Inf/negative/zero/int8 members, its record mangled,
FIFOs and links in its place). Every case must end with

- exit code 0, 1 (the command's one-line refusal) or 2 (argparse's);
- at most one line on stderr, without ``Traceback`` or Python's own wording of an internal error;
- finite numbers in every output (tables read back with :func:`ldhmm.cli.outputs.read_table`,
  the model file's JSON, the report's text, ``data info``'s lines);
- nothing written or changed in the case directory but ``--out`` (a model's side file beside it)
  and nothing changed behind a link.

``python tests/fuzz_cli.py --cases 300 --seed 0`` runs a round and prints the counts and every
case that got through; ``tests/test_fuzz_cli.py`` runs a few seeded cases of each family.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ldhmm.cli import main
from ldhmm.cli.outputs import read_table
from ldhmm.experiments.peak_rss import PeakRSS
from ldhmm.models.memory import parse_size

SYMBOLS = "home news sport tech weather shop".split()
#: the commands that read a model and a data file, and the suffixes of their --out
MODEL_COMMANDS = {
    "score": (".csv", ".parquet"),
    "posterior": (".csv", ".parquet"),
    "predict": (".csv", ".parquet"),
    "decode": (".csv", ".parquet"),
    "report": (".html",),
}
#: field values an adversarial user tries in place of each value of a model file
HOSTILE_VALUES = [
    None, True, False, "", "x", "\u00fcn\u00efc\u00f6d\u00e9 \u202e", "\x00", 0, -1, 1, -1e-300, 1e-320,
    1e308, 2**63, -(2**63), 10**40, math.nan, math.inf, -math.inf, [], {}, [1.0], [[1.0]], [[[1.0]]],
    {"npz": "prior.B"}, {"npz": "../../etc/passwd"}, "1e309", [math.nan] * 6, [-1.0] * 6, list(range(100)),
]  # fmt: skip
#: a case running longer than this is a finding (a command that does not end)
_SECONDS_PER_CASE = 120
#: the --max-memory of the data cases that set one; their peak must stay under it
_LIMIT = "256M"


class CaseTimeout(BaseException):
    """A case ran past its time (not an ``Exception``: the command's one-line handler must not
    turn it into an ordinary refusal)."""


@dataclass
class Case:
    family: str
    what: str
    argv: list
    out: str = ""  # the path --out names ("" when none): it may be written
    problems: list = field(default_factory=list)
    code: int | None = None
    stderr: str = ""
    peak_mib: float = 0.0  # resident memory the command added at its peak


# ---------------------------------------------------------------- the files every case starts from


def _quiet_main(argv: list) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def make_base(base: Path) -> dict:
    """A log, a fitted model (K = 2, V = 6) and a model with an NPZ side file (V = 33,000), in
    ``base``; returns their JSON documents."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(SYMBOLS, size=int(rng.integers(3, 9)))) for _ in range(40)]
    (base / "train.txt").write_text("\n".join(lines) + "\n")
    fit = ["--states", "2", "--restarts", "1", "--max-iter", "2", "--quiet"]
    code, _, err = _quiet_main(["fit", base / "train.txt", *fit, "--out", base / "model.json"])
    assert code == 0, err
    # a vocabulary large enough that K x V goes to the side file
    words = [f"w{v}" for v in range(33_000)]
    (base / "wide.txt").write_text(
        "\n".join(" ".join(words[i : i + 50]) for i in range(0, len(words), 50)) + "\n"
    )
    code, _, err = _quiet_main(["fit", base / "wide.txt", *fit, "--out", base / "wide.json"])
    assert code == 0, err
    (base / "wide-data.txt").write_text("w1 w2 w3\nw5 w4\n")
    ck = [*CHECKPOINT_FIT, "--checkpoint", base / "ck", "--out", base / "ck.json"]
    code, _, err = _quiet_main(["fit", base / "train.txt", *ck])
    assert code == 0, err
    return {
        "model": json.loads((base / "model.json").read_text()),
        "wide": json.loads((base / "wide.json").read_text()),
    }


# ---------------------------------------------------------------- mutations


def _leaves(obj, prefix=()):
    """Every path to a value of a JSON document (containers included)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, prefix + (k,))
    elif isinstance(obj, list) and len(obj) <= 64:
        for i, v in enumerate(obj):
            yield from _leaves(v, prefix + (i,))


def _set(doc, path, value):
    doc = json.loads(json.dumps(doc))
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _model_field_case(rng: random.Random, d: Path, docs: dict, i: int) -> tuple[str, Path, Path]:
    """One field of a model file replaced by a hostile value (or deleted)."""
    name = rng.choice(["model", "wide"])
    doc = docs[name]
    paths = [p for p in _leaves(doc) if p]
    path = rng.choice(paths)
    if rng.random() < 0.1:
        parent = json.loads(json.dumps(doc))  # a copy: the base document stays as it is
        node = parent
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        mutated, what = parent, f"{name}: {'.'.join(map(str, path))} deleted"
    else:
        value = rng.choice(HOSTILE_VALUES)
        mutated, what = _set(doc, path, value), f"{name}: {'.'.join(map(str, path))} = {str(value)[:40]}"
    target = d / f"m{i}.json"
    target.write_text(json.dumps(mutated, allow_nan=True, ensure_ascii=rng.random() < 0.5))
    if name == "wide":
        _copy_side_file(d, docs["wide"], target, mutated)
    return what, target, d / ("wide-data.txt" if name == "wide" else "train.txt")


def _copy_side_file(d: Path, doc: dict, target: Path, mutated) -> None:
    """The wide model's side file beside a copy of it, under the name the copy names."""
    side = doc.get("arrays")
    name = mutated.get("arrays") if isinstance(mutated, dict) else None
    if isinstance(side, str) and isinstance(name, str) and "/" not in name and name not in ("", ".", ".."):
        with contextlib.suppress(OSError):
            shutil.copyfile(d.parent / "base" / side, d / name)


def _model_file_case(rng: random.Random, d: Path, docs: dict, i: int) -> tuple[str, Path, Path]:
    """A model file damaged as a file: truncated, bytes flipped, keys doubled, re-encoded."""
    text = json.dumps(docs["model"])
    raw = text.encode()
    kind = rng.choice(
        ["truncated", "flipped", "duplicate key", "BOM", "CRLF", "UTF-16", "empty", "gzip", "top-level list",
         "top-level number", "huge number", "NUL", "nested", "huge string", "Infinity"]
    )  # fmt: skip
    if kind == "truncated":
        raw = raw[: rng.randrange(len(raw))]
    elif kind == "flipped":
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        raw = bytes(b)
    elif kind == "duplicate key":
        key = rng.choice(list(docs["model"]))
        raw = (text[:-1] + f", {json.dumps(key)}: {json.dumps(docs['model'][key])}}}").encode()
    elif kind == "BOM":
        raw = b"\xef\xbb\xbf" + raw
    elif kind == "CRLF":
        raw = json.dumps(docs["model"], indent=1).replace("\n", "\r\n").encode()
    elif kind == "UTF-16":
        raw = text.encode("utf-16")
    elif kind == "empty":
        raw = b""
    elif kind == "gzip":
        raw = gzip.compress(raw)
    elif kind == "top-level list":
        raw = f"[{text}]".encode()
    elif kind == "top-level number":
        raw = b"1e999"
    elif kind == "huge number":
        raw = text.replace('"n_states": 2', '"n_states": ' + "9" * 5000).encode()
    elif kind == "NUL":
        at = rng.randrange(len(raw))
        raw = raw[:at] + b"\x00" + raw[at:]
    elif kind == "nested":
        depth = rng.choice([500, 5000, 200_000])
        raw = text.replace('"config": {', '"config": {"deep": ' + "[" * depth + "]" * depth + ", ").encode()
    elif kind == "huge string":
        raw = text.replace('"config": {', '"config": {"note": "' + "x" * 5_000_000 + '", ').encode()
    else:
        raw = re.sub(r"\d+\.\d+", "Infinity", text, count=1).encode()
    target = d / f"m{i}.json"
    target.write_bytes(raw)
    return kind, target, d / "train.txt"


def _side_file_case(rng: random.Random, d: Path, docs: dict, i: int) -> tuple[str, Path, Path]:
    """The wide model's NPZ side file damaged: truncated, flipped, a member replaced."""
    doc = docs["wide"]
    source = d.parent / "base" / doc["arrays"]
    target = d / f"m{i}.json"
    target.write_text(json.dumps(doc))
    side = d / doc["arrays"]
    raw = source.read_bytes()
    kind = rng.choice(
        ["truncated", "flipped", "zip bomb", "pickled object", "wrong shape", "NaN member", "member missing",
         "int member", "not a zip", "empty", "fortran order", "big-endian", "huge header"]
    )  # fmt: skip
    members = {}
    with np.load(source) as z:
        members = {k: z[k] for k in z.files}
    key = next(iter(members))
    if kind == "truncated":
        side.write_bytes(raw[: rng.randrange(len(raw))])
    elif kind == "flipped":
        b = bytearray(raw)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        side.write_bytes(bytes(b))
    elif kind == "zip bomb":
        header = io.BytesIO()
        shape = (members[key].shape[0], rng.choice([10**8, 10**10, 2**62]))
        np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
        with zipfile.ZipFile(side, "w", compression=zipfile.ZIP_DEFLATED) as z:
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                f.write(header.getvalue() + bytes(1 << 22))
    elif kind == "huge header":
        with zipfile.ZipFile(side, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr(f"{key}.npy", b"\x93NUMPY\x01\x00" + b"\xff\xff" + b" " * (1 << 20))
    elif kind == "not a zip":
        side.write_bytes(os.urandom(4096))
    elif kind == "empty":
        side.write_bytes(b"")
    else:
        value = members[key]
        if kind == "pickled object":
            value = np.array([{"a": 1}] * 4, dtype=object)
        elif kind == "wrong shape":
            value = value[:, :-1]
        elif kind == "NaN member":
            value = value.copy()
            value[0, rng.randrange(value.shape[1])] = math.nan
        elif kind == "int member":
            value = value.astype(np.int64)
        elif kind == "fortran order":
            value = np.asfortranarray(value)
        elif kind == "big-endian":
            value = value.astype(">f8")
        arrays = {k: v for k, v in members.items() if not (kind == "member missing" and k == key)}
        if kind != "member missing":
            arrays[key] = value
        with open(side, "wb") as f:
            np.savez(f, **arrays)  # allows objects: np.load must refuse them
    return f"side file: {kind}", target, d / "wide-data.txt"


#: the fit a checkpoint case resumes (the base's checkpoint is of the same fit)
CHECKPOINT_FIT = ["--states", "2", "--restarts", "1", "--max-iter", "6", "--quiet"]
CHECKPOINT_KINDS = [
    "truncated", "flipped", "zip bomb", "pickled object", "wrong shape", "NaN member", "inf member",
    "negative member", "zero member", "int8 member", "big-endian", "member missing", "stray member",
    "meta garbage", "meta of another format", "meta without runs", "meta runs mangled", "not a zip",
    "empty", "FIFO", "link to /dev/zero", "a directory", "state file named but missing",
]  # fmt: skip


def _checkpoint_case(rng: random.Random, d: Path) -> str:
    """The base's finished checkpoint copied to ``d/ck`` and damaged; returns what was done."""
    source = d.parent / "base" / "ck" / "checkpoint.npz"
    ck = d / "ck"
    ck.mkdir()
    target = ck / "checkpoint.npz"
    raw = source.read_bytes()
    with np.load(source) as z:
        members = {k: z[k] for k in z.files}
    params = [k for k in members if k != "meta"]
    key = rng.choice(params)
    meta = json.loads(members["meta"].tobytes())
    kind = rng.choice(CHECKPOINT_KINDS)
    if kind == "truncated":
        target.write_bytes(raw[: rng.randrange(len(raw))])
    elif kind == "flipped":
        b = bytearray(raw)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        target.write_bytes(bytes(b))
    elif kind == "zip bomb":
        header = io.BytesIO()
        shape = (2, rng.choice([10**8, 10**10, 2**62]))
        np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("meta.npy", _npy(members["meta"]))
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                f.write(header.getvalue() + bytes(1 << 22))
    elif kind == "not a zip":
        target.write_bytes(os.urandom(4096))
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "FIFO":
        os.mkfifo(target)
    elif kind == "link to /dev/zero":
        target.symlink_to("/dev/zero")
    elif kind == "a directory":
        target.mkdir()
    else:
        arrays = dict(members)
        value = arrays[key].copy()
        if kind == "pickled object":
            arrays[key] = np.array([{"a": 1}] * 2, dtype=object)
        elif kind == "wrong shape":
            arrays[key] = np.ones(tuple(n + 1 for n in value.shape))
        elif kind in ("NaN member", "inf member", "negative member", "zero member"):
            bad = {
                "NaN member": math.nan,
                "inf member": math.inf,
                "negative member": -1.0,
                "zero member": 0.0,
            }
            value.flat[rng.randrange(value.size)] = bad[kind]
            arrays[key] = value
        elif kind == "int8 member":
            arrays[key] = value.astype(np.int8)
        elif kind == "big-endian":
            arrays[key] = value.astype(">f8")
        elif kind == "member missing":
            del arrays[key]
        elif kind == "stray member":
            arrays["run9/params/prior/pi"] = np.ones(2)
        else:
            if kind == "meta garbage":
                text = os.urandom(64)
            else:
                if kind == "meta of another format":
                    meta["format"] = rng.choice([1, 3, "2", None])
                elif kind == "meta without runs":
                    del meta["runs"]
                elif kind == "meta runs mangled":
                    run = meta["runs"][rng.randrange(len(meta["runs"]))]
                    field_name = rng.choice(sorted(run))
                    run[field_name] = rng.choice(HOSTILE_VALUES)
                elif kind == "state file named but missing":
                    meta["runs"][-1].update(
                        done=False, state_file="checkpoint.state.r1.i4.npz", state_after=4
                    )
                text = json.dumps(meta).encode()
            arrays["meta"] = np.frombuffer(text, dtype=np.uint8)
        with open(target, "wb") as f:
            np.savez(f, **arrays)  # allows objects: the reader must refuse them
    return f"checkpoint: {kind}"


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


#: the data files that take seconds each (left out of the quick test's cases)
HEAVY_DATA = ("huge line", "huge token", "many lines", "gzip bomb")
DATA_KINDS = [
    "random bytes", "bad UTF-8", "empty", "NUL bytes", "CRLF", "BOM", "CR only", "whitespace only",
    "gzip of random bytes", "unicode", "tabs", "CSV unbalanced quote", "CSV header only",
    "parquet of random bytes", "one token", "UTF-16", "comment only", "control characters", *HEAVY_DATA,
]  # fmt: skip


def _data_bytes(rng: random.Random, heavy: bool = True) -> tuple[str, bytes, str]:
    """A hostile data file's bytes, what it is, and its suffix (``heavy``: also the large ones)."""
    lines = [" ".join(rng.choice(SYMBOLS) for _ in range(rng.randint(2, 8))) for _ in range(20)]
    text = "\n".join(lines) + "\n"
    kind = rng.choice(DATA_KINDS if heavy else [k for k in DATA_KINDS if k not in HEAVY_DATA])
    suffix = ".txt"
    if kind == "random bytes":
        raw = os.urandom(rng.choice([1, 100, 10_000]))
    elif kind == "bad UTF-8":
        raw = text.encode().replace(b"news", b"n\xffw\xc3s", 3)
    elif kind == "huge line":
        raw = (" ".join(rng.choice(SYMBOLS) for _ in range(200_000)) + "\n").encode()
    elif kind == "empty":
        raw = b""
    elif kind == "NUL bytes":
        raw = text.encode().replace(b" ", b"\x00", 5)
    elif kind == "CRLF":
        raw = text.replace("\n", "\r\n").encode()
    elif kind == "BOM":
        raw = b"\xef\xbb\xbf" + text.encode()
    elif kind == "CR only":
        raw = text.replace("\n", "\r").encode()
    elif kind == "whitespace only":
        raw = b" \t \n\n   \n\t\n"
    elif kind == "huge token":
        raw = ("home " + "h" * 2_000_000 + " news\n" + text).encode()
    elif kind == "many lines":
        raw = ("home news\n" * 20_000).encode()
    elif kind == "gzip of random bytes":
        raw, suffix = gzip.compress(os.urandom(2000))[:-8] + os.urandom(8), ".txt.gz"
    elif kind == "gzip bomb":
        raw, suffix = gzip.compress(b"home " * 4_000_000), ".txt.gz"
    elif kind == "unicode":
        raw = text.replace("news", "n\u00e9ws\u202e\u200b").encode()
    elif kind == "tabs":
        raw = text.replace(" ", "\t").encode()
    elif kind == "CSV unbalanced quote":
        raw, suffix = b'sequence,event\ns1,"home\ns1,news\ns2,shop\n', ".csv"
    elif kind == "CSV header only":
        raw, suffix = b"sequence,event\n", ".csv"
    elif kind == "parquet of random bytes":
        raw, suffix = b"PAR1" + os.urandom(1000) + b"PAR1", ".parquet"
    elif kind == "one token":
        raw = b"home\n"
    elif kind == "UTF-16":
        raw = text.encode("utf-16")
    elif kind == "comment only":
        raw = b"# nothing here\n"
    else:
        raw = text.replace("news", "ne\x1bws\x7f", 2).encode()
    return kind, raw, suffix


def _data_case(rng: random.Random, d: Path, i: int, heavy: bool = True) -> tuple[str, Path]:
    kind, raw, suffix = _data_bytes(rng, heavy)
    target = d / f"data{i}{suffix}"
    target.write_bytes(raw)
    return kind, target


def _special_path(rng: random.Random, d: Path, victim: Path, like: Path) -> tuple[str, Path]:
    """A path argument that is not a plain file: links (in, out, dangling, loops), a FIFO, a
    directory, a device; ``like``: the regular file a link points at."""
    kind = rng.choice(
        ["link to the file", "link outside", "dangling link", "link loop", "FIFO", "directory",
         "/dev/zero", "/dev/null", "unreadable", "no such file", "name with newline", "empty name"]
    )  # fmt: skip
    p = d / f"special{rng.randrange(10**6)}{like.suffix}"
    if kind == "link to the file":
        p.symlink_to(like)
    elif kind == "link outside":
        p.symlink_to(victim / "target.txt")
    elif kind == "dangling link":
        p.symlink_to(victim / "nothing-here")
    elif kind == "link loop":
        p.symlink_to(p.name)
    elif kind == "FIFO":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()
    elif kind in ("/dev/zero", "/dev/null"):
        p.symlink_to(kind)
    elif kind == "unreadable":
        shutil.copyfile(like, p)
        p.chmod(0)  # (root reads it anyway)
    elif kind == "name with newline":
        p = d / f"bad\nname{like.suffix}"
        shutil.copyfile(like, p)
    elif kind == "empty name":
        p = Path("")
    return kind, p


def _out_path(rng: random.Random, d: Path, victim: Path, suffix: str) -> tuple[str, Path]:
    """An --out: usually a plain new file, sometimes hostile (a link out, a directory, a FIFO,
    a missing folder). Never a device: a writer that replaced one would break the machine."""
    kind = rng.choices(
        ["new file", "link outside", "dangling link outside", "directory", "FIFO", "missing folder",
         "existing file"], weights=[10, 1, 1, 1, 1, 1, 1],
    )[0]  # fmt: skip
    p = d / f"o{rng.randrange(10**6)}{suffix}"
    if kind == "link outside":
        p.symlink_to(victim / f"target{suffix}")
        (victim / f"target{suffix}").write_text("keep me\n")
    elif kind == "dangling link outside":
        p.symlink_to(victim / f"created{suffix}")
    elif kind == "directory":
        p.mkdir()
    elif kind == "FIFO":
        os.mkfifo(p)
    elif kind == "missing folder":
        p = d / "no-such-folder" / p.name
    elif kind == "existing file":
        p.write_text("old\n")
    return kind, p


# ---------------------------------------------------------------- cases


def make_case(
    rng: random.Random,
    d: Path,
    docs: dict,
    victim: Path,
    i: int,
    heavy: bool = True,
    checkpoints: bool = False,
) -> Case:
    """Case ``i`` of the round (its files written in ``d``; ``heavy``: large data files too;
    ``checkpoints``: the checkpoint family too, drawn beside the others)."""
    families, weights = ["model field", "model file", "side file", "data file", "path"], [4, 2, 2, 3, 2]
    if checkpoints:
        families, weights = families + ["checkpoint"], weights + [2]
    family = rng.choices(families, weights=weights)[0]
    if family == "checkpoint":
        what = _checkpoint_case(rng, d)
        argv = [
            "fit",
            d / "train.txt",
            *CHECKPOINT_FIT,
            "--checkpoint",
            d / "ck",
            "--out",
            d / "ck" / "m.json",
        ]
        return Case(family, what, argv, str(d / "ck"))
    command = rng.choice(list(MODEL_COMMANDS))
    suffix = rng.choice(MODEL_COMMANDS[command])
    out_kind, out = _out_path(rng, d, victim, suffix)
    fit = ["--states", "2", "--restarts", "1", "--max-iter", "2", "--quiet"]
    if family == "model field":
        what, model, data = _model_field_case(rng, d, docs, i)
    elif family == "model file":
        what, model, data = _model_file_case(rng, d, docs, i)
    elif family == "side file":
        what, model, data = _side_file_case(rng, d, docs, i)
    elif family == "data file":
        what, data = _data_case(rng, d, i, heavy)
        model = d / "model.json"
        if rng.random() < 0.15:
            return Case(family, f"data info: {what}", ["data", "info", data])
        # half the time under a limit the command must keep to
        limit = ["--max-memory", _LIMIT] if rng.random() < 0.5 else []
        if rng.random() < 0.3:
            out_kind, out = _out_path(rng, d, victim, ".json")
            argv = ["fit", data, *fit, *limit, "--out", out]
            return Case(family, f"fit: {what}; --out {out_kind} {' '.join(limit)}", argv, str(out))
        argv = [command, model, data, *limit, "--out", out] + (["--quiet"] if command != "report" else [])
        return Case(family, f"{command}: {what}; --out {out_kind} {' '.join(limit)}", argv, str(out))
    else:
        where = rng.choice(["model", "data", "event map", "init", "data info"])
        like = d / ("model.json" if where in ("model", "init") else "train.txt")
        what, special = _special_path(rng, d, victim, like)
        what = f"{where}: {what}"
        model, data = d / "model.json", d / "train.txt"
        if where == "model":
            model = special
        elif where == "data":
            data = special
        elif where == "event map":
            return Case(
                family,
                what,
                ["score", model, data, "--event-map", special, "--quiet", "--out", out],
                str(out),
            )
        elif where == "init":
            out_kind, out = _out_path(rng, d, victim, ".json")
            argv = ["fit", data, *fit, "--init", special, "--out", out]
            return Case(family, f"{what}; --out {out_kind}", argv, str(out))
        else:
            return Case(family, what, ["data", "info", special])
    argv = [command, model, data, "--out", out] + (["--quiet"] if command != "report" else [])
    return Case(family, f"{command}: {what}; --out {out_kind}", argv, str(out))


# ---------------------------------------------------------------- checks

#: Python's own wording of an internal error: a message with these did not come from a check
INTERNAL = re.compile(
    r"Traceback|object is not|object has no attribute|NoneType|unhashable|index out of range|"
    r"invalid literal for|not supported between|unsupported operand|takes \d+ positional|"
    r"referenced before assignment|is not subscriptable|out of bounds for axis|could not broadcast|"
    r"maximum recursion|CPUDispatcher|No such file or directory: ''"
)
_NONFINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


def _snapshot(*roots: Path) -> dict:
    state = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(p)
                    state[p] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)
    return state


def _nonfinite_in_json(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_nonfinite_in_json(v) for v in value.values())
    if isinstance(value, list):
        return any(_nonfinite_in_json(v) for v in value)
    return False


def _output_problems(path: Path) -> list:
    """What is not finite in a written output."""
    if path.suffix in (".csv", ".parquet"):
        df = read_table(path)
        for column in df.columns:
            for value in df[column]:
                arr = np.asarray(value)
                # a CSV's "nan" is read back as text: the word counts as the number
                text = isinstance(value, str) and _NONFINITE.fullmatch(value.strip())
                if text or (arr.dtype.kind in "fc" and not np.isfinite(arr).all()):
                    return [f"non-finite value in column {column!r}"]
        return []
    if path.suffix == ".json":
        if _nonfinite_in_json(json.loads(path.read_text())):
            return ["non-finite number in the model file written"]
        return []
    text = re.sub(r"<[^>]*>", " ", path.read_text(errors="replace"))
    return ["'nan' or 'inf' in the report"] if _NONFINITE.search(text) else []


def run_case(case: Case, d: Path, victim: Path) -> Case:
    """Run ``case`` (cwd ``d``) and record what got through in ``case.problems``."""
    before = _snapshot(d, victim)
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(_SECONDS_PER_CASE)
    meter = PeakRSS()
    meter.start()
    try:
        case.code, stdout, case.stderr = _quiet_main(case.argv)
        case.peak_mib = meter.stop_mib()
    except CaseTimeout:
        case.problems.append(f"ran past {_SECONDS_PER_CASE} s")
        return case
    except BaseException as err:  # noqa: BLE001 -- whatever escapes the command is the finding
        case.problems.append(f"escaped the command: {type(err).__name__}: {str(err)[:200]}")
        return case
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    lines = case.stderr.strip().splitlines()
    if "--max-memory" in case.argv:
        limit = parse_size(case.argv[case.argv.index("--max-memory") + 1])
        if case.peak_mib * 2**20 > limit:
            case.problems.append(f"peak {case.peak_mib:.0f} MiB over --max-memory {limit / 2**20:.0f} MiB")
    if case.code not in (0, 1, 2):
        case.problems.append(f"exit code {case.code}")
    if len(lines) > 1:
        case.problems.append(f"{len(lines)} lines on stderr")
    if INTERNAL.search(case.stderr):
        case.problems.append("an internal error's wording")
    if case.code == 0 and case.argv[:2] == ["data", "info"] and _NONFINITE.search(stdout):
        case.problems.append("'nan' or 'inf' in data info")
    after = _snapshot(d, victim)
    changed = {p for p in set(after) | set(before) if after.get(p) != before.get(p)}
    outside = sorted(p for p in changed if not (case.out and p.startswith(case.out)))
    if outside:
        case.problems.append(f"written outside --out: {outside[:3]}")
    out = Path(case.out) if case.out else None
    if case.code == 0 and out is not None and out.is_file() and not out.is_symlink():
        try:
            case.problems += _output_problems(out)
        except Exception as err:  # noqa: BLE001
            case.problems.append(f"output unreadable: {type(err).__name__}: {err}")
    return case


def _timeout(signum, frame):
    raise CaseTimeout()


def run_round(n_cases: int, seed: int, workdir: Path, families=None, log=None, heavy: bool = True) -> list:
    """``n_cases`` seeded cases (``families``: only these; ``heavy``: large data files too),
    each in a fresh directory holding copies of the base files. Returns the cases run."""
    rng = random.Random(seed)
    base = workdir / "base"
    if not base.exists():
        base.mkdir(parents=True)
        docs = make_base(base)
        (base / "docs.json").write_text(json.dumps(docs))
    docs = json.loads((base / "docs.json").read_text())
    cases = []
    cwd = os.getcwd()
    i = 0
    while len(cases) < n_cases:
        i += 1
        d = Path(tempfile.mkdtemp(prefix=f"case{i}-", dir=workdir))
        victim = Path(tempfile.mkdtemp(prefix=f"victim{i}-", dir=workdir))
        (victim / "target.txt").write_text("home news\n")
        for name in ("train.txt", "model.json", "wide-data.txt"):
            shutil.copyfile(base / name, d / name)
        case = make_case(rng, d, docs, victim, i, heavy, checkpoints=not families or "checkpoint" in families)
        if not families or case.family in families:
            os.chdir(d)
            try:
                start = time.perf_counter()
                run_case(case, d, victim)
            finally:
                os.chdir(cwd)
            cases.append(case)
        if log is not None and case in cases:
            status = "GOT THROUGH " + "; ".join(case.problems) if case.problems else "ok"
            seconds = time.perf_counter() - start
            print(
                f"{i:4d} {seconds:5.1f}s exit {case.code} {case.family}: {case.what}: {status}",
                file=log,
                flush=True,
            )
            if case.stderr and not case.problems:
                print(f"     {case.stderr.strip()[:160]}", file=log, flush=True)
            if case.problems:
                print(
                    f"     argv {case.argv}\n     stderr {case.stderr.strip()[:500]!r}", file=log, flush=True
                )
        for p in (d, victim):
            with contextlib.suppress(OSError):
                for q in p.rglob("*"):
                    if not q.is_symlink():
                        q.chmod(0o700) if q.is_dir() else q.chmod(0o600)
            shutil.rmtree(p, ignore_errors=True)
    return cases


def main_fuzz(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", nargs="+", help="only these families (model field, ...)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cases = run_round(args.cases, args.seed, Path(tmp), args.families, log=sys.stdout)
    families = sorted({c.family for c in cases})
    print(
        "\n| family | cases | exit 0 | exit 1 | exit 2 | got through |\n| --- | --- | --- | --- | --- | --- |"
    )
    for fam in families + ["all"]:
        these = [c for c in cases if fam in ("all", c.family)]
        codes = [sum(c.code == k for c in these) for k in (0, 1, 2)]
        through = sum(bool(c.problems) for c in these)
        print(f"| {fam} | {len(these)} | {codes[0]} | {codes[1]} | {codes[2]} | {through} |")
    return int(any(c.problems for c in cases))


if __name__ == "__main__":
    sys.exit(main_fuzz())
