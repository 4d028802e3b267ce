"""Every table ``score``, ``posterior``, ``predict`` and ``decode`` write, in every output format
(.csv, .parquet, .pq), read back (``cli.outputs.read_table``) and compared value for value with
the Python API's results: nothing abbreviated, rounded or lost (a 600-token sequence's 1,200
state marginals included)."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ldhmm.cli import main
from ldhmm.cli.outputs import read_table
from ldhmm.data import load_text
from ldhmm.modelfiles import data_for_model, load_model
from ldhmm.output_files import POSTERIOR_KEY, read_posterior_file

SYMBOLS = ["home", "news", "sport", "tech"]
FORMATS = (".csv", ".parquet", ".pq")


def _cli(argv) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    return code


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("round_trip")
    rng = np.random.default_rng(3)
    lines = [" ".join(rng.choice(SYMBOLS, size=int(rng.integers(2, 12)))) for _ in range(40)]
    (d / "train.txt").write_text("\n".join(lines) + "\n")
    long = " ".join(rng.choice(SYMBOLS, size=600))
    (d / "log.txt").write_text(f"{lines[0]}\n{long}\nnews\n")
    _cli(["fit", d / "train.txt", "--states", "2", "--restarts", "1", "--max-iter", "5",
          "--out", d / "model.json", "--quiet"])  # fmt: skip
    model = load_model(d / "model.json")
    db = data_for_model(d / "log.txt", model)
    return d, model, db


def _same(column, expected):
    assert len(column) == len(expected)
    for got, want in zip(column, expected):
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape and got.dtype.kind == want.dtype.kind, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)  # bit for bit (NaN nowhere: finite or refused)


@pytest.mark.parametrize("suffix", FORMATS)
def test_every_output_reads_back_value_for_value(setup, suffix):
    d, model, db = setup
    seqs, ids = db.sequences, [f"log.txt:{i}" for i in (1, 2, 3)]
    assert len(db.sequences[1]) == 600 and load_text(d / "log.txt").ids is not None
    out = {c: d / f"{c}{suffix}" for c in ("score", "posterior", "predict", "decode")}
    _cli(
        [
            "score",
            d / "model.json",
            d / "log.txt",
            "--is-samples",
            "4",
            "--seed",
            "7",
            "--out",
            out["score"],
            "--quiet",
        ]
    )
    for command in ("posterior", "predict", "decode"):
        _cli([command, d / "model.json", d / "log.txt", "--out", out[command], "--quiet"])

    score = read_table(out["score"])
    assert list(score["sequence_id"]) == ids
    elbo = model.score_samples(seqs)
    _same(score["elbo"], elbo)
    _same(score["elbo_per_token"], elbo / db.lengths)
    _same(score["length"], db.lengths)
    _same(score["log_marginal_is"], model.log_marginal_is(seqs, n_samples=4, seed=7))

    post, api = read_table(out["posterior"]), model.posterior(seqs)
    _same(post["elbo"], api["elbo"])
    _same(
        post["state_marginals"], [np.asarray(m, dtype=np.float64).reshape(-1) for m in api["state_marginals"]]
    )
    assert len(post["state_marginals"][1]) == 600 * 2
    for group in ("pi", "A", "B"):
        conc = np.asarray(api[f"g_{group}"], dtype=np.float64)
        mean = conc / conc.sum(-1, keepdims=True)
        _same(post[f"{group}_mean"], list(mean.reshape(len(seqs), -1)))

    nxt, proba = read_table(out["predict"]), model.predict_next_proba(seqs)
    order = np.argsort(-proba, axis=1, kind="stable")
    for i in range(3):
        assert list(nxt[f"next_{i + 1}"]) == [db.vocabulary[v] for v in order[:, i]]
        _same(nxt[f"p_{i + 1}"], proba[np.arange(len(seqs)), order[:, i]])

    paths = read_table(out["decode"])
    assert list(paths["states"]) == [" ".join(map(str, p)) for p in model.decode(seqs)]


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_posterior_file_reads_back_as_arrays_of_their_shapes(setup, suffix):
    d, model, db = setup
    out = d / f"shapes{suffix}"
    _cli(["posterior", d / "model.json", d / "log.txt", "--out", out, "--quiet"])
    # a Parquet file carries K, V and the vocabulary; a CSV file takes them from the model
    post = read_posterior_file(out, model=d / "model.json" if suffix == ".csv" else None)
    api, M, K, V = model.posterior(db.sequences), len(db), model.n_states, model.n_symbols_
    assert post.n_states == K and post.vocabulary == list(model.vocabulary_) and len(post.vocabulary) == V
    assert {g: a.shape for g, a in post.arrays.items()} == {"pi": (M, K), "A": (M, K, K), "B": (M, K, V)}
    for group in ("pi", "A", "B"):
        conc = np.asarray(api[f"g_{group}"], dtype=np.float64)
        np.testing.assert_array_equal(post.arrays[group], conc / conc.sum(-1, keepdims=True))
    assert [m.shape for m in post.state_marginals] == [(n, K) for n in db.lengths]
    np.testing.assert_array_equal(post.state_marginals[1], api["state_marginals"][1])
    if suffix != ".csv":
        meta = pq.read_schema(out).metadata[b"PANDAS_ATTRS"]  # readable without pandas
        shapes = json.loads(meta)[POSTERIOR_KEY]["shapes"]
        assert shapes["A_mean"] == ["K", "K"] and shapes["state_marginals"] == ["N", "K"]
    _cli(["decode", d / "model.json", d / "log.txt", "--out", d / f"paths{suffix}", "--quiet"])
    with pytest.raises(ValueError, match="not an ldhmm posterior file"):
        read_posterior_file(d / f"paths{suffix}")
