"""Sizes a file or an argument claims are checked against the memory limit before anything of
that size is read or allocated: a model file's size, each NPZ side-file array's shape (its
header, read alone: a zip bomb is refused unread), the symbol names a model without vocabulary
needs, and the log-weights ``--is-samples`` keeps."""

from __future__ import annotations

import contextlib
import io
import json
import resource
import zipfile

import numpy as np
import pytest

from ldhmm import ParameterSharing, VariantHMM
from ldhmm.cli import main
from ldhmm.models.memory import MemoryEstimateError, importance_sampling_bytes, set_max_memory


def _run(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def model_doc(tmp_path_factory):
    d = tmp_path_factory.mktemp("sizes")
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 4, 8) for _ in range(20)]
    model = VariantHMM(2, n_symbols=4, sharing=ParameterSharing(B="point"), seed=0, max_iter=2).fit(seqs)
    model.save(d / "small.json", vocabulary=list("abcd"))
    (d / "log.txt").write_text("a b c d\n")
    return d, json.loads((d / "small.json").read_text())


def _bomb(d, doc, V, vocabulary=None, name="bomb"):
    """A model whose point B (2 x V) is a side-file member claiming its full size but holding a
    few compressed megabytes of zeros."""
    doc = json.loads(json.dumps(doc))
    doc["config"]["n_symbols"], doc["vocabulary"] = V, vocabulary
    doc["arrays"], doc["log_point"]["B"] = f"{name}.npz", {"npz": "log_point.B"}
    (d / f"{name}.json").write_text(json.dumps(doc))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2, V)})
    with zipfile.ZipFile(d / f"{name}.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("log_point.B.npy", "w", force_zip64=True) as f:
            f.write(header.getvalue())
            for _ in range(min(4, 2 * V * 8 >> 20)):
                f.write(bytes(1 << 20))
    return d / f"{name}.json"


def test_a_zip_bomb_side_file_is_refused_before_it_is_read(model_doc):
    d, doc = model_doc
    path = _bomb(d, doc, 50_000_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, this process's peak so far
    code, err = _run(["score", path, d / "log.txt", "--max-memory", "2G", "--out", d / "o.csv"])
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert (
        f"{path}: field 'log_point.B': array 'log_point.B' of bomb.npz (shape (2, 50000000)) needs about"
        in err
    )
    assert grown < 300 * 1024  # KiB: nothing of the claimed 800 MB was read
    assert not (d / "o.csv").exists()


def test_a_model_without_vocabulary_is_checked_for_its_symbol_names(model_doc):
    d, doc = model_doc
    V = 200_000  # B: 3.2 MB, read and checked; the names a log's mapping needs: 40 MB
    doc = json.loads(json.dumps(doc))
    doc["config"]["n_symbols"], doc["vocabulary"] = V, None
    doc["arrays"], doc["log_point"]["B"] = "names.npz", {"npz": "log_point.B"}
    (d / "names.json").write_text(json.dumps(doc))
    np.savez(d / "names.npz", **{"log_point.B": np.full((2, V), -np.log(V))})
    set_max_memory("30M")
    try:
        with pytest.raises(MemoryEstimateError, match=r"a model of V = 200000 symbols without a vocabulary"):
            VariantHMM.load(d / "names.json")
    finally:
        set_max_memory(None)
    assert VariantHMM.load(d / "names.json").n_symbols_ == V  # under the machine's limit


def test_a_model_file_too_large_to_parse_is_refused_unread(model_doc, tmp_path):
    d, doc = model_doc
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc) + " " * 3_000_000)  # 3 MB: parsed, ~12 MB
    code, err = _run(["score", big, d / "log.txt", "--max-memory", "8M", "--out", tmp_path / "o.csv"])
    assert code == 1 and f"{big}: a model file of 3.0 MB needs about" in err, err


def test_is_samples_is_checked_before_any_scoring(model_doc, tmp_path):
    d, _ = model_doc
    code, err = _run(
        [
            "score",
            d / "small.json",
            d / "log.txt",
            "--is-samples",
            "1000000000",
            "--max-memory",
            "2G",
            "--out",
            tmp_path / "o.csv",
        ]
    )
    assert (
        code == 1 and "importance sampling (1000000000 samples)" in err and len(err.strip().splitlines()) == 1
    ), err
    # the log-weights kept for the log-sum-exp grow with the samples, whatever the batch
    small, large = (importance_sampling_bytes(2, 4, 10, 8, n) for n in (10, 10**9))
    assert large - small >= 8 * (10**9 - 10) * 10
