"""The fitting settings of the LDHMM-family estimators: one table (models/fit_settings.py), read
by every constructor, signature, docstring, configuration and the inference classes."""

from __future__ import annotations

import inspect
import pydoc
from dataclasses import fields

import numpy as np
import pytest

from ldhmm import LDHMM, ParameterSharing, VariantHMM
from ldhmm.baselines import HMMV, VBHMM
from ldhmm.inference import VariationalEM
from ldhmm.inference.distributed.workers import PartitionWorker
from ldhmm.models.fit_settings import SETTING_NAMES, FitSettings

ESTIMATORS = (VariantHMM, LDHMM, VBHMM, HMMV)
#: A value of each setting other than its default.
OTHER = {
    "max_iter": 7,
    "tol": 0.5,
    "e_step_max_iter": 9,
    "e_step_tol": 1e-3,
    "dtype": "float32",
    "bucket_cells": 1000,
    "n_init": 2,
    "path_n_init": 1,
    "seeded_start": "none",
    "m_step": "paper",
    "effort": "quick",
    "start_policy": "hmm",
    "hmm_start_concentration": 1.0,
    "refresh_max": 2,
    "start_every": 3,
    "acceleration": "squarem",
    "identical_sequences": "each",
    "init": "random",
    "random_starts": 0,
    "emission_layout": "sparse",
}
BAD = {
    "max_iter": [0, 2.5, True, "3"],
    "tol": [-1e-9, float("nan"), float("inf"), "x", True],
    "e_step_max_iter": [0, -1, 1.0],
    "e_step_tol": [-1.0, float("nan")],
    "dtype": ["float16", None],
    "bucket_cells": [0, 10.0],
    "n_init": [0, True, np.float64(2)],
    "path_n_init": [0, True, 1.5],
    "seeded_start": ["top", True, None],
    "m_step": ["newton"],
    "effort": ["fast", None, 1],
    "start_policy": ["random", 3],
    "hmm_start_concentration": [0.0, -1.0, float("inf"), True, "30"],
    "refresh_max": [-1, 1.5, True],
    "start_every": [-2, "1"],
    "acceleration": ["nesterov", True],
    "identical_sequences": ["twice", 1],
    "init": ["chain"],
    "random_starts": [-1, False],
    "emission_layout": ["csr"],
}


def test_the_tables_of_this_test_cover_every_setting():
    assert set(OTHER) == set(BAD) == set(SETTING_NAMES)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_setting_is_in_signature_config_and_help(cls):
    params = inspect.signature(cls).parameters
    for f in fields(FitSettings):
        p = params[f.name]
        assert p.kind is p.KEYWORD_ONLY and p.default == getattr(cls.fit_defaults, f.name), f.name
    model = cls(2)
    config = model.get_config()
    assert all(config[name] == getattr(cls.fit_defaults, name) for name in SETTING_NAMES)
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "{fit_settings}" not in text
    for name in SETTING_NAMES:
        assert f"|  {name} : " in text, name  # an entry of the Parameters section


def test_baselines_keep_their_own_defaults():
    assert VBHMM(2).max_iter == HMMV(2).max_iter == 200 and VBHMM(2).tol == HMMV(2).tol == 1e-6
    assert LDHMM(2).max_iter == VariantHMM(2).max_iter == 100 and LDHMM(2).tol == 1e-4


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_keyword_construction_and_config_round_trip(cls):
    model = cls(3, n_symbols=5, seed=4, **OTHER)
    for name, value in OTHER.items():
        assert getattr(model, name) == value and type(getattr(model, name)) is type(value), name
    config = model.get_config()
    assert {k: config[k] for k in OTHER} == OTHER
    extra = {"sharing": model.sharing} if cls is VariantHMM else {}
    again = cls(**config, **extra)
    assert again.get_config() == config and again.fit_settings == model.fit_settings


def test_settings_reach_the_em_driver_and_the_workers():
    for consumer in (VariationalEM, PartitionWorker):
        taken = inspect.signature(consumer).parameters
        forwarded = FitSettings().arguments(consumer)
        assert forwarded and all(name in taken for name in forwarded), consumer
    model = LDHMM(2, **OTHER)
    engine = model._engine()
    for name in ("max_iter", "tol", "e_step_max_iter", "e_step_tol", "m_step", "random_starts"):
        assert getattr(engine, name) == OTHER[name], name
    model.n_symbols_ = 3  # as fit sets it before the workers are built
    (worker,) = model.placement().runner("local", None, [([np.array([0, 1, 2])], np.array([0]))]).workers
    for name in ("bucket_cells", "e_step_max_iter", "e_step_tol"):
        assert getattr(worker, name) == OTHER[name], name


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_one_line_naming_the_setting(name):
    for value in BAD[name]:
        for cls in (LDHMM, VBHMM):
            with pytest.raises(ValueError) as info:
                cls(2, **{name: value})
            message = str(info.value)
            assert message.startswith(f"{name} must be") and "\n" not in message, message


def test_unknown_and_foreign_arguments_are_refused():
    with pytest.raises(TypeError, match="LDHMM.*'max_iters'"):
        LDHMM(2, max_iters=3)
    # VariantHMM takes prior_concentration and sharing, LDHMM (learned priors, fixed sharing) not
    with pytest.raises(TypeError, match="LDHMM.*'prior_concentration'"):
        LDHMM(2, prior_concentration=2.0)
    with pytest.raises(TypeError, match="LDHMM.*'sharing'"):
        LDHMM(2, sharing=ParameterSharing())
    # positions keep their meaning up to the guide; the settings are keyword-only
    with pytest.raises(TypeError, match="positional"):
        LDHMM(2, 3, "pf", 100)
    assert HMMV(2, 3, 0.5, True, 0.0, "ff").get_config()["prior_concentration"] == 0.5
