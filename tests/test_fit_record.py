"""What a fit saw and did, kept with the model: every restart's ELBO per iteration and the one
kept, and the data it was fitted on (source, sizes, SHA-256), through save/load, ``describe()``
and the refusals of a bad value (one line naming the field)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from ldhmm import LDHMM
from ldhmm.cli.main import main
from ldhmm.data import DataOptions
from ldhmm.data.fingerprint import PYTHON_DATA, content_sha256
from ldhmm.models.description import kept_start_words
from ldhmm.models.file_format import START_KINDS, ModelFileError
from ldhmm.report_html import render_report

RESTARTS = 3


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """An LDHMM fitted with 3 restarts on 30 sampled sequences, saved; the sequences."""
    truth = LDHMM.from_hyperparameters([1, 2], [[5, 1], [1, 5]], [[4, 1, 1], [1, 1, 4]])
    lengths = np.random.default_rng(0).integers(3, 15, 30)
    data = truth.sample(30, lengths=lengths, seed=1)
    model = LDHMM(2, seed=0, max_iter=6, n_init=RESTARTS, effort="thorough").fit(data)
    path = tmp_path_factory.mktemp("record") / "model.json"
    model.save(path)
    return model, data, path


def _independent_sha256(sequences) -> str:
    """The hash by hand: each sequence's length and codes as 8-byte little-endian integers."""
    blob = b"".join(
        int(len(s)).to_bytes(8, "little") + b"".join(int(x).to_bytes(8, "little", signed=True) for x in s)
        for s in sequences
    )
    return hashlib.sha256(blob).hexdigest()


def test_every_restart_is_recorded_and_the_best_is_kept(fitted):
    model, data, _ = fitted
    runs = model.restart_elbo_histories_
    assert len(runs) == RESTARTS and all(run.size >= 1 for run in runs)
    finals = [run[-1] for run in runs]
    assert model.kept_restart_ == int(np.argmax(finals))
    # the PF guide's kept run is the fit: its history is the model's
    np.testing.assert_array_equal(runs[model.kept_restart_], model.elbo_history_)
    # each restart is the fit of its own seed alone (n_init=1 with that seed)
    alone = LDHMM(2, seed=model.restart_seeds()[1], max_iter=6, n_init=1, effort="thorough").fit(data)
    np.testing.assert_array_equal(runs[1], alone.elbo_history_)
    assert model.training_data_ == {
        "source": PYTHON_DATA,
        "n_sequences": 30,
        "n_tokens": int(sum(len(s) for s in data)),
        "sha256": _independent_sha256(data),
    }


def test_the_hash_tells_sequence_boundaries_and_order_apart():
    a = [np.array([0, 1]), np.array([2])]
    assert content_sha256(a) == _independent_sha256(a)
    assert content_sha256(a) != content_sha256([np.array([0]), np.array([1, 2])])
    assert content_sha256(a) != content_sha256(a[::-1])


def test_save_load_and_describe(fitted):
    model, _, path = fitted
    loaded = LDHMM.load(path)
    assert loaded.kept_restart_ == model.kept_restart_ and loaded.training_data_ == model.training_data_
    assert loaded.start_kind_ == model.start_kind_ in ("restart", "seeded")
    for mine, theirs in zip(model.restart_elbo_histories_, loaded.restart_elbo_histories_, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    d = loaded.describe()
    table = d.restarts
    assert list(table.columns) == ["restart", "seed", "iteration", "elbo", "kept"]
    for r, run in enumerate(model.restart_elbo_histories_):
        rows = table[table["restart"] == r + 1]
        np.testing.assert_array_equal(rows["elbo"], run)
        assert list(rows["iteration"]) == list(range(1, run.size + 1))
        assert set(rows["seed"]) == {model.restart_seeds()[r]} and set(rows["kept"]) == {
            r == model.kept_restart_
        }
    summary = dict(zip(d.summary["field"], d.summary["value"]))
    assert summary["kept restart"] == f"{model.kept_restart_ + 1} of {RESTARTS}"
    assert summary["training data"] == PYTHON_DATA and summary["training sequences"] == "30"
    assert summary["training data SHA-256"] == model.training_data_["sha256"]
    assert summary["start of the kept run"] == model.start_kind_
    # every start is recorded, the symbol-seeded one included (thorough: the restarts and it)
    assert set(loaded.start_elbo_histories_) == {"seeded"}
    np.testing.assert_array_equal(
        loaded.start_elbo_histories_["seeded"], model.start_elbo_histories_["seeded"]
    )
    assert set(d.starts["start"]) == {"seeded"} and d.starts["kept"].all() == (model.start_kind_ == "seeded")
    assert summary["stopped because"] == str(model.convergence_)
    page = render_report(d, "model")
    fit = page[page.index("<h2>The fit</h2>") :]
    # the kept run's chart, then one line per start in the starts' chart, and their table: the
    # restarts and the symbol-seeded start
    assert fit.count("<polyline") == 1 + RESTARTS + 1 and "training ELBO of every start" in fit
    assert fit.count("<tr>") == 1 + RESTARTS + 1 and "<td>symbol-seeded start</td>" in fit


def test_a_file_without_the_record_still_loads(fitted, tmp_path):
    _, _, path = fitted
    doc = json.loads(path.read_text())
    del doc["fit_history"], doc["training_data"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    model = LDHMM.load(old)
    assert not hasattr(model, "restart_elbo_histories_") and not hasattr(model, "training_data_")
    d = model.describe()
    summary = dict(zip(d.summary["field"], d.summary["value"]))
    assert d.restarts is None and summary["training data"] == "not recorded in the model file"
    assert not hasattr(model, "start_kind_")
    assert summary["start of the kept run"] == "not recorded in the model file"


def test_a_fit_history_without_its_start_still_loads(fitted, tmp_path):
    """Files written before ``fit_history.start``: the restarts load, the start is not recorded."""
    model, _, path = fitted
    doc = json.loads(path.read_text())
    assert doc["fit_history"]["start"] == model.start_kind_
    del doc["fit_history"]["start"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    loaded = LDHMM.load(old)
    assert loaded.kept_restart_ == model.kept_restart_ and not hasattr(loaded, "start_kind_")


def test_a_record_a_load_would_refuse_is_not_written(fitted, tmp_path):
    """The save checks the fit record as a load does: a bad ``start_kind_`` is refused, naming
    the field, and the file already there stays as it was."""
    model, _, path = fitted
    target = tmp_path / "kept.json"
    model.save(target)
    before = target.read_bytes()
    saved = model.start_kind_
    try:
        model.start_kind_ = "split:x"
        with pytest.raises(ModelFileError, match="field 'fit_history.start'"):
            model.save(target)
    finally:
        model.start_kind_ = saved
    assert target.read_bytes() == before


def test_every_start_kind_has_its_words():
    """The summary's words for how a kept run started cover every kind a file may record."""
    assert kept_start_words("restart") is None  # a restart is named by its number
    assert START_KINDS[0] == "restart"
    for kind in START_KINDS[1:]:
        assert kept_start_words(kind), kind
    assert kept_start_words("split:3").startswith("state 3 ")
    assert kept_start_words("other") is None


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("fit_history", [1, 2], "fit_history"),
        ("fit_history", {"restarts": [[1.0]]}, "fit_history.kept"),
        ("fit_history", {"restarts": [[1.0]], "kept": 0, "best": 0}, "fit_history.best"),
        ("fit_history", {"restarts": [[1.0, "x"]], "kept": 0}, "fit_history.restarts"),
        ("fit_history", {"restarts": [[1.0]], "kept": 1}, "fit_history.kept"),
        ("fit_history", {"restarts": [[1.0]], "kept": True}, "fit_history.kept"),
        ("fit_history", {"restarts": [[1.0]], "kept": 0, "start": "split:x"}, "fit_history.start"),
        ("fit_history", {"restarts": [[1.0]], "kept": 0, "start": "split:01"}, "fit_history.start"),
        ("fit_history", {"restarts": [[1.0]], "kept": 0, "start": 3}, "fit_history.start"),
        ("fit_history", {"restarts": [[1.0]], "kept": 0, "start": "best"}, "fit_history.start"),
        ("training_data", {"source": "a", "n_sequences": 1, "n_tokens": 2}, "training_data.sha256"),
        (
            "training_data",
            {"source": 3, "n_sequences": 1, "n_tokens": 2, "sha256": None},
            "training_data.source",
        ),
        (
            "training_data",
            {"source": "a", "n_sequences": -1, "n_tokens": 2, "sha256": None},
            "training_data.n_sequences",
        ),
        (
            "training_data",
            {"source": "a", "n_sequences": 1, "n_tokens": 2.5, "sha256": None},
            "training_data.n_tokens",
        ),
        (
            "training_data",
            {"source": "a", "n_sequences": 1, "n_tokens": 2, "sha256": "ABC"},
            "training_data.sha256",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(fitted, tmp_path, capsys, field, value, named):
    _, _, path = fitted
    doc = json.loads(path.read_text())
    doc[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ModelFileError, match=f"field '{named}'") as err:
        LDHMM.load(bad)
    assert "\n" not in str(err.value)
    # the command line: one line naming file and field, no traceback
    capsys.readouterr()
    code = main(["score", str(bad), str(tmp_path / "none.txt"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"ldhmm score: error: {bad}: field '{named}': ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_command_line_records_the_file(tmp_path, capsys):
    log = tmp_path / "log.txt"
    rng = np.random.default_rng(2)
    log.write_text("\n".join(" ".join(rng.choice(list("abc"), 5)) for _ in range(8)) + "\n")
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "fit",
                str(log),
                "--states",
                "2",
                "--restarts",
                "2",
                "--seeded-start",
                "none",
                "--effort",
                "thorough",
                "--max-iter",
                "3",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    db = DataOptions().read(log)
    assert doc["training_data"] == {
        "source": str(log),
        "n_sequences": 8,
        "n_tokens": 40,
        "sha256": _independent_sha256(db.sequences),
    }
    assert len(doc["fit_history"]["restarts"]) == 2 and doc["fit_history"]["kept"] in (0, 1)
