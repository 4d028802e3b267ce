"""Model files under attack: every field mutated, each mutation loaded-and-finite or refused
with one ValueError that names the file and the field (never NaN, never a torch/numba trace)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldhmm import ParameterSharing, VariantHMM
from ldhmm.baselines import HMMV, VBHMM
from ldhmm.experiments.datasets import synthetic_database
from ldhmm.modelfiles import load_model
from ldhmm.models import LDHMM

FIXTURES = Path(__file__).parent / "fixtures"
DB = synthetic_database(30, seed=5)
SEQS = DB.sequences[:6] + [np.array([0]), np.array([5, 5, 5, 5])]


def _saved_doc(tmp_path_factory, model, name):
    path = tmp_path_factory.mktemp("m") / f"{name}.json"
    model.fit(DB).save(path)
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    kw = dict(seed=0, max_iter=4, n_init=1)
    return {
        "LDHMM": _saved_doc(tmp_path_factory, LDHMM(2, **kw), "ldhmm"),
        "LDHMM-FF": _saved_doc(tmp_path_factory, LDHMM(2, guide="ff", **kw), "ff"),
        "VBHMM": _saved_doc(tmp_path_factory, VBHMM(2, **kw), "vbhmm"),
        "HMMV": _saved_doc(tmp_path_factory, HMMV(2, **kw), "hmmv"),
    }


def _leaves(obj, prefix=()):
    """Every path into the document (containers and leaves; list indices up to 2)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            yield from _leaves(v, prefix + (i,))


HOSTILE = [
    math.nan, math.inf, -math.inf, -1.0, 0.0, 1e-300, 1e300, -5, 0, 7, 2**40, True, False, None,
    "x", "", [], [1.0], [[1.0, 2.0]], {}, {"a": 1}, 0.5, 3.0,
]  # fmt: skip
DELETE = object()


def _mutate(doc, path, value):
    doc = json.loads(json.dumps(doc))
    if not path:
        return value if value is not DELETE else {}
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _check(doc, path):
    path.write_text(json.dumps(doc))  # NaN / Infinity tokens included, as json allows
    try:
        model = load_model(path)
    except ValueError as err:
        msg = str(err)
        assert msg.startswith(str(path)) and "\n" not in msg, msg
        assert "Traceback" not in msg and "CPUDispatcher" not in msg
        return "refused"
    scores = model.score_samples(SEQS)
    assert np.all(np.isfinite(scores)), (doc, scores)
    return "loaded"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_mutation_loads_finite_or_is_refused(docs, tmp_path, data):
    name = data.draw(st.sampled_from(sorted(docs)))
    doc = docs[name]
    paths = list(_leaves(doc))
    where = data.draw(st.sampled_from(paths))
    value = data.draw(st.sampled_from(HOSTILE + [DELETE]))
    _check(_mutate(doc, where, value), tmp_path / "m.json")


@pytest.mark.parametrize(
    "where, value, field",
    [
        (("prior", "A", 0, 0), math.nan, "prior.A"),
        (("prior", "pi", 1), -2.0, "prior.pi"),
        (("prior", "B"), [[1.0, 2.0], [3.0, 4.0]], "prior.B"),
        (("prior", "B", 0, 1), "1.5", "prior.B"),
        (("config", "n_states"), 3, "prior"),
        (("config", "e_step_tol"), "tiny", "config.e_step_tol"),
        (("config", "bucket_cells"), True, "config.bucket_cells"),
        (("sharing", "B"), "shared", "posterior"),
        (("vocabulary",), ["a", "a", "b", "c", "d", "e"], "vocabulary"),
        (("version",), 3, "version"),
        (("elbo_history", 0), math.nan, "elbo_history"),
    ],
)
def test_named_refusals(docs, tmp_path, where, value, field):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_mutate(docs["LDHMM"], where, value)))
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert f"field '{field}" in str(info.value) and str(path) in str(info.value)
    if field == "version":
        assert "newer" in str(info.value) and "3" in str(info.value)


def test_the_class_sharing_is_enforced(docs, tmp_path):
    doc = _mutate(docs["VBHMM"], ("class",), "LDHMM")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="sharing|prior|posterior"):
        load_model(path)


def test_unmutated_files_round_trip(docs, tmp_path):
    for name, doc in docs.items():
        assert _check(doc, tmp_path / f"{name}.json") == "loaded"


def test_a_loaded_model_is_written_back_unchanged(tmp_path):
    """fixtures/model_format2.json (an HMMV with a vocabulary) was written by the save code as it
    was before it moved to models/file_format.py: loaded and saved again, the same document
    (every value exactly; the config's keys now follow the settings table's order; settings
    added since, ``seeded_start``, ``path_n_init`` and ``hmm_start_concentration``, at the
    defaults the file was loaded with, and ``effort`` "thorough": the v4 policy it was fitted
    with), and a second round trip gives the same bytes."""
    model = load_model(FIXTURES / "model_format2.json")
    assert model.vocabulary_ == [f"s{i}" for i in range(6)]
    model.save(tmp_path / "again.json")
    written = (tmp_path / "again.json").read_text()
    expected = json.loads((FIXTURES / "model_format2.json").read_text())
    expected["config"]["seeded_start"] = "symbols"
    expected["config"]["path_n_init"] = None
    expected["config"]["hmm_start_concentration"] = 30.0
    # a file from before v5: fitted with v4's restarts and refreshes, which "thorough" names
    expected["config"].update(
        effort="thorough",
        start_policy=None,
        refresh_max=None,
        start_every=None,
        acceleration=None,
        identical_sequences=None,
    )
    assert json.loads(written) == expected
    load_model(tmp_path / "again.json").save(tmp_path / "twice.json")
    assert (tmp_path / "twice.json").read_text() == written


def test_settings_that_would_make_scoring_run_for_ever_are_refused(docs, tmp_path):
    for key, value in (("random_starts", 2**40), ("e_step_max_iter", 10**9)):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps(_mutate(docs["LDHMM"], ("config", key), value)))
        with pytest.raises(ValueError, match=f"config.{key}"):
            load_model(path)


def test_a_symbol_a_point_B_forbids_scores_minus_inf_not_nan(tmp_path):
    train = [np.array([0, 1, 0, 1, 1]), np.array([1, 0, 0, 1])]
    model = VariantHMM(2, n_symbols=3, sharing=ParameterSharing(B="point"), seed=0, max_iter=5, n_init=1)
    model.fit(train)
    assert torch.isneginf(model.params_.log_point["B"][:, 2]).all()  # symbol 2 never seen
    scores = model.score_samples([np.array([0, 1, 2]), np.array([0, 1])])
    assert scores[0] == -np.inf and np.isfinite(scores[1])
    for method in (model.predict_next_proba, model.decode, model.posterior):
        with pytest.raises(ValueError, match="symbol 2"):
            method([np.array([0, 2])])
    # and the same model from its file
    model.save(tmp_path / "p.json")
    again = load_model(tmp_path / "p.json")
    assert again.score_samples([np.array([2])])[0] == -np.inf


# ---- large arrays in the NPZ side file -----------------------------------------------------------


@pytest.fixture(scope="module")
def large_vocabulary_model(tmp_path_factory):
    """A model whose B (2 x 40,000) goes to the side file; the directory it is saved in."""
    rng = np.random.default_rng(0)
    V = 40_000
    seqs = [rng.integers(0, V, size=int(rng.integers(2, 12))) for _ in range(120)]
    model = LDHMM(2, n_symbols=V, seed=0, max_iter=2, n_init=1).fit(seqs)
    directory = tmp_path_factory.mktemp("large")
    model.save(directory / "m.json")
    return model, seqs, directory


def test_large_arrays_go_to_an_npz_side_file(large_vocabulary_model):
    model, seqs, directory = large_vocabulary_model
    doc = json.loads((directory / "m.json").read_text())
    assert doc["arrays"].startswith("m.json.") and doc["arrays"].endswith(".npz")
    assert doc["prior"]["B"] == {"npz": "prior.B"} and (directory / doc["arrays"]).is_file()
    assert isinstance(doc["prior"]["A"], list)  # small arrays stay inline
    assert (directory / "m.json").stat().st_size < 10_000
    loaded = load_model(directory / "m.json")
    for g in model.params_.prior:
        assert np.array_equal(loaded.params_.prior[g].numpy(), model.params_.prior[g].numpy()), g
    np.testing.assert_array_equal(loaded.score_samples(seqs[:10]), model.score_samples(seqs[:10]))


def test_a_loaded_side_file_model_is_written_back_byte_for_byte(large_vocabulary_model, tmp_path):
    _, _, directory = large_vocabulary_model
    load_model(directory / "m.json").save(tmp_path / "m.json")
    names = sorted(p.name for p in directory.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == names and len(names) == 2
    for name in names:
        assert (tmp_path / name).read_bytes() == (directory / name).read_bytes(), name


def test_small_models_have_no_side_file(tmp_path):
    LDHMM(2, seed=0, max_iter=2, n_init=1).fit(DB).save(tmp_path / "small.json")
    assert "arrays" not in json.loads((tmp_path / "small.json").read_text())
    assert not list(tmp_path.glob("*.npz"))


def test_a_replaced_model_leaves_one_side_file(large_vocabulary_model, tmp_path):
    """Saving over a model file: the new side file is written under its own name before the JSON
    is replaced, and the old one is removed afterwards (also when the new model has none)."""
    model, seqs, _ = large_vocabulary_model
    model.save(tmp_path / "m.json")
    first = json.loads((tmp_path / "m.json").read_text())["arrays"]
    other = LDHMM(2, n_symbols=model.n_symbols_, seed=1, max_iter=1, n_init=1).fit(seqs)
    other.save(tmp_path / "m.json")
    second = json.loads((tmp_path / "m.json").read_text())["arrays"]
    assert second != first and [p.name for p in tmp_path.glob("*.npz")] == [second]
    LDHMM(2, seed=0, max_iter=1, n_init=1).fit(DB).save(tmp_path / "m.json")
    assert not list(tmp_path.glob("*.npz"))


def _copy_model(directory, tmp_path, doc_change=None, archive=None):
    doc = json.loads((directory / "m.json").read_text())
    if doc_change:
        doc_change(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    if archive is not None:
        np.savez(tmp_path / doc["arrays"], **archive)
    return tmp_path / "m.json"


@pytest.mark.parametrize(
    "case, field",
    [
        ("missing side file", "arrays"),
        ("directory in the name", "arrays"),
        ("pickled object array", "prior.B"),
        ("a single .npy array", "arrays"),
        ("a truncated archive", "arrays"),
        ("missing key", "prior.B"),
        ("wrong shape", "prior.B"),
        ("negative values", "prior.B"),
        ("not an archive", "arrays"),
    ],
)
def test_side_file_refusals(large_vocabulary_model, tmp_path, case, field):
    model, _, directory = large_vocabulary_model
    B = model.params_.prior["B"].double().numpy()
    name = json.loads((directory / "m.json").read_text())["arrays"]
    if case == "missing side file":
        path = _copy_model(directory, tmp_path)
    elif case == "a single .npy array":
        path = _copy_model(directory, tmp_path)
        with open(tmp_path / name, "wb") as f:
            np.save(f, B)
    elif case == "a truncated archive":
        path = _copy_model(directory, tmp_path)
        (tmp_path / name).write_bytes((directory / name).read_bytes()[:1000])
    elif case == "directory in the name":
        path = _copy_model(directory, tmp_path, lambda d: d.update(arrays="../" + name))
    elif case == "pickled object array":
        path = _copy_model(directory, tmp_path, archive={"prior.B": np.array([object()] * 3, dtype=object)})
    elif case == "missing key":
        path = _copy_model(directory, tmp_path, archive={"other": B})
    elif case == "wrong shape":
        path = _copy_model(directory, tmp_path, archive={"prior.B": B[:, :10]})
    elif case == "negative values":
        path = _copy_model(directory, tmp_path, archive={"prior.B": -B})
    else:
        path = _copy_model(directory, tmp_path)
        (tmp_path / name).write_bytes(b"not a zip archive")
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert f"field '{field}'" in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)
