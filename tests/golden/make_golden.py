"""Write (or check) the golden file: numbers the project computes, to guard refactors.

``python tests/golden/make_golden.py --write`` records them in ``tests/golden/golden.json``;
``tests/test_golden.py`` recomputes them and compares (1e-12 relative unless a key says
otherwise). Regenerate only when a change means to alter results, and say why in the commit.

The numbers are computed with the CPU's instruction set pinned (``PORTABLE_ARITHMETIC``: numba,
torch, numpy and the BLAS libraries on their baseline x86-64 code paths) so that every machine
computes the same bits: with the host's own kernels (AVX2 or AVX-512, chosen at run time) the
first ELBO differs in the last bit between an AVX2 and an AVX-512 machine, and twelve EM
iterations grow that to 7e-7 relative. ``main`` runs itself again under that environment
when it is not already set (it must be set before numba, torch and numpy are imported).

What is recorded: fitted hyper-parameters, ELBO traces (E- and M-steps), held-out scores,
importance-sampled log p(x) and state marginals, for LDHMM (PF, FF, FF torch path, paper and
collapsed M-steps, a user-written guide, float32), VBHMM, HMMV, a point-B variant, the HMM and
LDA baselines, on synthetic data and on the Entree paper subset (when the data are present).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from ldhmm import LDHMM, FFGuide, ParameterSharing, VariantHMM
from ldhmm.baselines.hmm import HMM
from ldhmm.baselines.hmmv import HMMV
from ldhmm.baselines.lda import LDA
from ldhmm.baselines.vbhmm import VBHMM
from ldhmm.data import kfold_indices, load_paper_subset
from ldhmm.inference.distributed.arithmetic import arithmetic_identity, portable, portable_environment

GOLDEN = Path(__file__).with_name("golden.json")

#: Environment under which the golden numbers are computed: every library that picks its
#: kernels by the CPU it runs on is held to its baseline x86-64 kernels (numba compiles for a
#: generic CPU, torch's ATen and numpy use no SIMD dispatch above their baseline, MKL and
#: OpenBLAS use their compatible kernels). Slower, and the same bits on any x86-64 machine.
PORTABLE_ARITHMETIC = portable_environment()


_SPEC = importlib.util.spec_from_file_location(
    "reference_chain", Path(__file__).resolve().parents[1] / "reference_chain.py"
)
reference_chain = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_chain)
LogSpacePFGuide = reference_chain.LogSpacePFGuide  # a user-written guide


def _arr(x):
    return np.asarray(x, dtype=np.float64).tolist()


def _variant_record(model, held_out, is_samples=0):
    rec = {
        "elbo_history": _arr(model.elbo_history_),
        "trace": [float(v) for _, v in model.elbo_trace_],
        "score_samples": _arr(model.score_samples(held_out)),
    }
    for kind in ("prior", "posterior", "log_point"):
        for g, v in getattr(model.params_, kind).items():
            rec[f"{kind}_{g}"] = _arr(v.double().numpy())
    if is_samples:
        rec["log_marginal_is"] = _arr(model.log_marginal_is(held_out, n_samples=is_samples, seed=3))
    return rec


def synthetic_records():
    truth = LDHMM.from_hyperparameters(
        [1.0, 2.0, 0.5],
        [[6.0, 1.0, 1.0], [1.0, 6.0, 1.0], [1.0, 1.0, 6.0]],
        [[4.0, 1.0, 0.5, 0.5], [0.5, 4.0, 1.0, 0.5], [0.5, 0.5, 1.0, 4.0]],
    )
    rng = np.random.default_rng(0)
    train = truth.sample(150, lengths=rng.integers(1, 30, 150), seed=1)
    held = truth.sample(40, lengths=rng.integers(1, 30, 40), seed=2)
    out = {}
    # The records before v5 were fitted at the v4 defaults: effort="thorough" reproduces them
    # bit for bit (the check that it does); the "_standard" and "_quick" records are v5's,
    # which identical_sequences="each" reproduces bit for bit; the "_v6" records are v6's
    # defaults (identical sequences computed once, starts hashed from content).
    v4 = {"effort": "thorough"}
    v5 = {"identical_sequences": "each"}
    runs = {
        "ldhmm_pf": LDHMM(3, guide="pf", seed=0, max_iter=12, **v4),
        "ldhmm_ff": LDHMM(3, guide="ff", seed=0, max_iter=12, **v4),
        "ldhmm_pf_paper": LDHMM(3, guide="pf", seed=1, max_iter=10, m_step="paper", **v4),
        "ldhmm_ff_paper": LDHMM(3, guide="ff", seed=1, max_iter=10, m_step="paper", **v4),
        "ldhmm_ff_torch": LDHMM(3, guide=FFGuide(extra_sweeps=1), seed=0, max_iter=6, **v4),
        "ldhmm_user_guide": LDHMM(2, guide=LogSpacePFGuide(), seed=1, max_iter=6, m_step="paper", **v4),
        "ldhmm_pf_restarts": LDHMM(2, guide="pf", seed=0, max_iter=6, n_init=2, **v4),
        "vbhmm": VBHMM(3, max_iter=10, seed=0, **v4),
        "hmmv": HMMV(3, max_iter=10, seed=0, **v4),
        "hmmv_learned": HMMV(3, max_iter=8, seed=0, learn_prior=True, **v4),
        "point_B": VariantHMM(3, sharing=ParameterSharing(B="point"), max_iter=8, seed=0, **v4),
        "ldhmm_pf_standard": LDHMM(3, guide="pf", seed=0, max_iter=12, **v5),
        "ldhmm_ff_standard": LDHMM(3, guide="ff", seed=0, max_iter=12, **v5),
        "ldhmm_pf_quick": LDHMM(3, guide="pf", seed=0, max_iter=12, effort="quick", **v5),
        "point_B_standard": VariantHMM(3, sharing=ParameterSharing(B="point"), max_iter=8, seed=0, **v5),
        "ldhmm_pf_v6": LDHMM(3, guide="pf", seed=0, max_iter=12),
        "ldhmm_ff_v6": LDHMM(3, guide="ff", seed=0, max_iter=12),
        "ldhmm_pf_quick_v6": LDHMM(3, guide="pf", seed=0, max_iter=12, effort="quick"),
    }
    for key, model in runs.items():
        model.fit(train)
        out[key] = _variant_record(model, held, is_samples=10 if key in ("ldhmm_pf", "ldhmm_ff") else 0)
        if key == "ldhmm_pf":
            post = model.posterior(held[:5])
            out[key]["state_marginals"] = _arr(np.concatenate(post["state_marginals"]))
            out[key]["g_B"] = _arr(post["g_B"])
    # The user guide's whole fit runs torch's vectorized log-space recursion, whose last bits
    # depend on the CPU's instruction set (AVX2 or AVX-512 kernels); EM grows them to ~1e-8.
    out["ldhmm_user_guide"]["rtol"] = 1e-7
    f32 = LDHMM(3, guide="pf", seed=0, max_iter=5, dtype="float32", **v4).fit(train)
    out["ldhmm_pf_float32"] = {
        "elbo_history": _arr(f32.elbo_history_),
        "score_samples": _arr(f32.score_samples(held)),
        "rtol": 1e-4,
    }
    hmm = HMM(3, seed=0, max_iter=20).fit(train)
    out["hmm"] = {"score_samples": _arr(hmm.score_samples(held))}
    lda = LDA(3, seed=0).fit(train)
    out["lda"] = {"score_samples": _arr(lda.score_samples(held))}
    return out


def entree_records(data_dir):
    db = load_paper_subset("entree", data_dir)
    seqs = list(db)
    train_idx, test_idx = kfold_indices(len(seqs), 10, seed=0)[0]
    train = [seqs[i] for i in train_idx]
    held = [seqs[i] for i in test_idx]
    out = {}
    for key, model in {
        "pf": LDHMM(3, n_symbols=db.n_symbols, guide="pf", seed=0, effort="thorough"),
        "ff": LDHMM(3, n_symbols=db.n_symbols, guide="ff", seed=0, effort="thorough"),
        "pf_standard": LDHMM(3, n_symbols=db.n_symbols, guide="pf", seed=0, identical_sequences="each"),
        "ff_standard": LDHMM(3, n_symbols=db.n_symbols, guide="ff", seed=0, identical_sequences="each"),
        "pf_v6": LDHMM(3, n_symbols=db.n_symbols, guide="pf", seed=0),
    }.items():
        model.fit(train)
        out[f"entree_ldhmm_{key}"] = _variant_record(model, held)
    hmm = HMM(3, n_symbols=db.n_symbols, seed=0).fit(train)
    out["entree_hmm"] = {"score_samples": _arr(hmm.score_samples(held))}
    return out


def compute(data_dir=None) -> dict:
    torch.set_num_threads(1)
    records = synthetic_records()
    if data_dir is not None and Path(data_dir).is_dir():
        records.update(entree_records(data_dir))
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write tests/golden/golden.json")
    parser.add_argument("--out", help="write the records computed to this JSON file")
    parser.add_argument("--data-dir", help="the UCI data (default: $LDHMM_DATA, else ../shared/data)")
    parser.add_argument("--synthetic-only", action="store_true", help="leave out the Entree records")
    args = parser.parse_args(argv)
    if not all(os.environ.get(k) == v for k, v in PORTABLE_ARITHMETIC.items()):
        # Too late for this process: numba, torch and numpy read their CPU settings on import.
        argv = sys.argv[1:] if argv is None else list(argv)
        env = {**os.environ, **PORTABLE_ARITHMETIC}
        raise SystemExit(subprocess.run([sys.executable, __file__, *argv], env=env).returncode)
    data_dir = args.data_dir or os.environ.get(
        "LDHMM_DATA", str(Path(__file__).resolve().parents[3] / "shared" / "data")
    )
    if not portable():  # the environment was set, and a library did not follow it
        raise SystemExit(f"make_golden: not computing with portable kernels: {arithmetic_identity()}")
    records = compute(None if args.synthetic_only else data_dir)
    if args.out:
        Path(args.out).write_text(json.dumps(records))
    if args.write:
        GOLDEN.write_text(json.dumps(records, indent=0))
        print(f"wrote {GOLDEN} ({len(records)} records)")
    if not (args.out or args.write):
        json.dump({k: sorted(v) for k, v in records.items()}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
