"""A user's own logs end to end: ``ldhmm fit/score/posterior/predict/decode`` and model files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ldhmm.cli import main
from ldhmm.data import load_text, recode
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.modelfiles import load_model
from ldhmm.models import LDHMM

FIXTURES = Path(__file__).parent / "fixtures"
SYMBOLS = ["home", "news", "sport", "tech", "weather", "shop"]


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(80):
        fav = rng.choice(6, 2, replace=False)
        n = int(rng.integers(4, 15))
        lines.append(
            " ".join(SYMBOLS[rng.choice(fav) if rng.random() < 0.7 else rng.integers(6)] for _ in range(n))
        )
    (d / "train.txt").write_text("# a comment line\n" + "\n".join(lines) + "\n")
    (d / "new.txt").write_text("news news home\n\nsport tech sport sport\n")
    (d / "unseen.txt").write_text("home news\nhome casino\n")
    rows = [(f"s{i}", t, tok) for i, line in enumerate(lines[:30]) for t, tok in enumerate(line.split())]
    pd.DataFrame(rows, columns=["session", "t", "page"]).to_csv(d / "events.csv", index=False)
    pd.DataFrame(rows, columns=["session", "t", "page"]).to_parquet(d / "events.parquet", index=False)
    return d


@pytest.fixture(scope="module")
def fitted(logs, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "model.json"
    code = main(["fit", str(logs / "train.txt"), "--states", "2", "--restarts", "1", "--max-iter", "20",
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    return out


def test_fit_saves_the_vocabulary_and_scores_by_name(logs, fitted, tmp_path, capsys):
    doc = json.loads(fitted.read_text())
    assert doc["version"] == 2 and doc["vocabulary"] == sorted(SYMBOLS)
    model = load_model(fitted)
    code, out, _ = run_cli(
        ["score", fitted, logs / "new.txt", "--out", tmp_path / "s.csv", "--is-samples", "5"], capsys
    )
    assert code == 0 and "2 sequences" in out
    text = (tmp_path / "s.csv").read_text().splitlines()
    header = "sequence_id,length,elbo,elbo_per_token,log_marginal_is,log_marginal_is_se,log_marginal_is_ess"
    assert text[0] == header and len(text) == 3
    scores = pd.read_csv(tmp_path / "s.csv")
    assert scores["sequence_id"].tolist() == ["new.txt:1", "new.txt:3"]  # physical lines
    # the same numbers as the Python route, with symbols mapped by name
    db = recode(load_text(logs / "new.txt"), model.vocabulary_)
    np.testing.assert_allclose(scores["elbo"], model.score_samples(db.sequences), rtol=0, atol=0)
    assert db.sequences[0].tolist() == [model.vocabulary_.index(s) for s in ("news", "news", "home")]
    assert np.all(scores["log_marginal_is"] >= scores["elbo"] - 1.0)


def test_posterior_predict_decode(logs, fitted, tmp_path, capsys):
    model = load_model(fitted)
    assert run_cli(["posterior", fitted, logs / "new.txt", "--out", tmp_path / "p.parquet"], capsys)[0] == 0
    post = pd.read_parquet(tmp_path / "p.parquet")
    assert len(post) == 2 and {"pi_mean", "A_mean", "B_mean", "state_marginals"} <= set(post.columns)
    assert len(post["B_mean"][0]) == 2 * 6 and np.isclose(np.sum(post["pi_mean"][0]), 1.0)
    marg = np.asarray(post["state_marginals"][1]).reshape(4, 2)
    np.testing.assert_allclose(marg.sum(axis=1), 1.0)
    assert (
        run_cli(["predict", fitted, logs / "new.txt", "--top-k", "3", "--out", tmp_path / "n.csv"], capsys)[0]
        == 0
    )
    nxt = pd.read_csv(tmp_path / "n.csv")
    assert list(nxt.columns) == ["sequence_id", "next_1", "p_1", "next_2", "p_2", "next_3", "p_3"]
    db = recode(load_text(logs / "new.txt"), model.vocabulary_)
    proba = model.predict_next_proba(db.sequences)
    best = [model.vocabulary_[i] for i in proba.argmax(axis=1)]
    assert nxt["next_1"].tolist() == best and (nxt["p_1"] >= nxt["p_2"]).all()
    assert run_cli(["decode", fitted, logs / "new.txt", "--out", tmp_path / "d.csv"], capsys)[0] == 0
    paths = pd.read_csv(tmp_path / "d.csv")
    assert [len(s.split()) for s in paths["states"]] == [3, 4]


def test_unseen_symbol_is_one_line_and_writes_nothing(logs, fitted, tmp_path, capsys):
    out = tmp_path / "s.csv"
    code, _, err = run_cli(["score", fitted, logs / "unseen.txt", "--out", out], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "'casino'" in err and "unseen.txt:2" in err
    assert not out.exists() and not list(tmp_path.iterdir())
    # a model trained with <unk> maps it on request
    unk = tmp_path / "unk.json"
    assert main(["fit", str(logs / "train.txt"), "--states", "2", "--restarts", "1", "--max-iter", "5",
                 "--unknown", "reserve", "--out", str(unk), "--quiet"]) == 0  # fmt: skip
    assert run_cli(["score", unk, logs / "unseen.txt", "--out", out, "--unknown", "map"], capsys)[0] == 0
    assert np.isfinite(pd.read_csv(out)["elbo"]).all()


def test_fit_prints_how_it_stopped(logs, tmp_path, capsys):
    out = tmp_path / "m.json"
    fit = ["fit", logs / "train.txt", "--states", "2", "--restarts", "1", "--out", out]
    code, stdout, err = run_cli(fit + ["--max-iter", "1"], capsys)
    assert code == 0, err
    (line,) = [s for s in stdout.splitlines() if s.startswith("stopped: ")]
    assert line.startswith("stopped: max_iter: 1 EM iteration of at most 1, last value ")
    code, stdout, err = run_cli(fit + ["--tol", "0.5"], capsys)
    assert code == 0, err
    # the test is met at iteration 2 (a 50% change); the refresh E-step of iteration 3 gains less
    assert "stopped: converged: 3 EM iterations of at most 100" in stdout


def test_event_logs_and_init(logs, fitted, tmp_path, capsys):
    for name in ("events.csv", "events.parquet"):
        out = tmp_path / f"{name}.json"
        code, _, err = run_cli(["fit", logs / name, "--sequence-col", "session", "--event-col", "page",
                                "--time-col", "t", "--states", "2", "--restarts", "1", "--max-iter", "5",
                                "--out", out, "--quiet"], capsys)  # fmt: skip
        assert code == 0, err
        assert len(load_model(out).vocabulary_) <= 6
    code, _, err = run_cli(
        ["fit", logs / "events.csv", "--states", "2", "--out", tmp_path / "x.json"], capsys
    )
    assert code == 1 and "--sequence-col" in err
    # --init continues from the saved model on a new log (its K, guide and vocabulary)
    out = tmp_path / "cont.json"
    code, _, err = run_cli(
        ["fit", logs / "new.txt", "--init", fitted, "--max-iter", "3", "--out", out, "--quiet"], capsys
    )
    assert code == 0, err
    assert load_model(out).vocabulary_ == load_model(fitted).vocabulary_
    code, _, err = run_cli(["fit", logs / "new.txt", "--init", fitted, "--states", "5", "--out", out], capsys)
    assert code == 1 and "differs" in err


def test_bad_model_files_and_outputs(logs, fitted, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run_cli(["score", bad, logs / "new.txt", "--out", tmp_path / "s.csv"], capsys)
    assert code == 1 and "not an ldhmm model file" in err
    doc = json.loads(fitted.read_text())
    doc["version"] = 99
    bad.write_text(json.dumps(doc))
    code, _, err = run_cli(["score", bad, logs / "new.txt", "--out", tmp_path / "s.csv"], capsys)
    assert code == 1 and "99" in err and "newer" in err
    code, _, err = run_cli(["score", fitted, logs / "new.txt", "--out", tmp_path / "s.txt"], capsys)
    assert code == 1 and ".csv" in err
    assert not (tmp_path / "s.csv").exists()
    # a data file whose format cannot be told (binary): one line naming file and line
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    code, _, err = run_cli(["score", fitted, tmp_path / "blob.bin", "--out", tmp_path / "s.csv"], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "blob.bin" in err
    assert not (tmp_path / "s.csv").exists()


def test_format1_model_files_still_load():
    model = load_model(FIXTURES / "model_format1.json")
    assert isinstance(model, LDHMM) and getattr(model, "vocabulary_", None) is None
    db = synthetic_database(40, seed=3)
    # the held-out E-step's one-state and smoothed starts raised the second by 6.4e-7
    expected = [-53.94887145, -18.01176622, -20.86564878, -10.94391456, -17.79295906]
    np.testing.assert_allclose(model.score_samples(db.sequences[:5]), expected, rtol=1e-8)


def test_fit_on_a_database_keeps_its_vocabulary(tmp_path):
    db = synthetic_database(30, seed=1)
    model = LDHMM(2, seed=0, max_iter=3, n_init=1).fit(db)
    assert model.vocabulary_ == db.vocabulary
    model.save(tmp_path / "m.json")
    assert load_model(tmp_path / "m.json").vocabulary_ == db.vocabulary


def test_a_model_without_vocabulary_reads_integer_codes(tmp_path, capsys):
    (tmp_path / "codes.txt").write_text("0 1 2\n3 3 5 4\n")
    (tmp_path / "words.txt").write_text("home news\n")
    model = FIXTURES / "model_format1.json"
    code, _, err = run_cli(
        ["predict", model, tmp_path / "codes.txt", "--top-k", "5", "--out", tmp_path / "n.csv"], capsys
    )
    assert code == 0, err
    nxt = pd.read_csv(tmp_path / "n.csv")
    assert set(nxt["next_1"].astype(str)) <= {str(v) for v in range(6)}
    code, _, err = run_cli(["score", model, tmp_path / "words.txt", "--out", tmp_path / "s.csv"], capsys)
    assert code == 1 and "integers 0..5" in err and len(err.strip().splitlines()) == 1


def test_posterior_csv_keeps_every_value_of_a_long_sequence(logs, fitted, tmp_path, capsys):
    # 600 tokens: 1,200 state marginals, past numpy's 1,000-value print threshold
    long = " ".join(["news", "home", "sport"] * 200)
    (tmp_path / "long.txt").write_text(long + "\nnews home\n")
    args = ["posterior", fitted, tmp_path / "long.txt", "--out"]
    assert run_cli(args + [tmp_path / "p.csv"], capsys)[0] == 0
    assert run_cli(args + [tmp_path / "p.parquet"], capsys)[0] == 0
    as_csv, as_parquet = pd.read_csv(tmp_path / "p.csv"), pd.read_parquet(tmp_path / "p.parquet")
    assert "..." not in (tmp_path / "p.csv").read_text()
    for column in ("state_marginals", "B_mean", "pi_mean"):
        for text, values in zip(as_csv[column], as_parquet[column]):
            np.testing.assert_array_equal(json.loads(text), np.asarray(values))  # exactly
    assert len(json.loads(as_csv["state_marginals"][0])) == 600 * 2
