"""``ldhmm hinton``: Hinton diagrams of a fitted LDHMM-PF (the paper's Figure 7).

Left column: the database-level hyper-parameters alpha_A (K x K), beta (K x V) and alpha_pi
(1 x K), each row normalized to sum to 1 (its mean under the prior: the database's typical
transition row, emission row and initial distribution). Right column: one sequence's
variational parameters gamma_A, gamma_B, gamma_pi, as posterior means (rows normalized).
Each square's area is proportional to the value. The fitted model is saved as JSON in the
output directory and reused by a rerun with the same configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import harness as H
from .compare import _nonneg_int, _positive_int

__all__ = ["register", "run_hinton", "hinton"]


def register(subparsers):
    p = subparsers.add_parser(
        "hinton", help="Hinton diagrams of LDHMM-PF's hyper-parameters and one sequence (Figure 7)",
        description="Fit LDHMM-PF and draw Hinton diagrams of the database-level hyper-parameters "
                    "and of one sequence's variational parameters (the paper's Figure 7).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=["entree", "msnbc", "splice", "synthetic"], default=None,
                     help="default: entree when its files are in the data directory, else synthetic")
    src.add_argument("--file", help="a user's sequence file")
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument("--n-sequences", type=_positive_int, default=None, help="seeded sample of this many sequences")
    p.add_argument("--states", type=_positive_int, default=6, metavar="K", help="K (default 6, as in the paper)")
    p.add_argument("--sequence", type=_nonneg_int, default=0, help="index of the sequence to show (default 0)")
    p.add_argument("--guide", choices=["pf", "ff"], default="pf", help="variational form (default pf)")
    p.add_argument("--out", default="results/hinton", help="output directory (default results/hinton)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed (default 0)")
    p.add_argument("--max-iter", type=_positive_int, default=None, help="EM iterations at most")
    p.add_argument("--tol", type=float, default=None, help="EM relative tolerance")
    p.add_argument("--force", action="store_true", help="reuse an --out of another configuration")
    p.set_defaults(func=run_hinton)
    return p


def hinton(ax, matrix, row_labels=None, col_labels=None, title=""):
    """Draw a Hinton diagram of a non-negative matrix: squares with area proportional to value."""
    from matplotlib.patches import Rectangle

    W = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    top = float(np.max(np.abs(W))) if W.size and np.max(np.abs(W)) > 0 else 1.0
    ax.set_facecolor("0.55")
    ax.set_aspect("equal", "box")
    for (i, j), w in np.ndenumerate(W):
        size = np.sqrt(abs(w) / top) * 0.95
        color = "white" if w >= 0 else "black"
        ax.add_patch(Rectangle((j - size / 2, i - size / 2), size, size, facecolor=color, edgecolor=color))
    ax.set_xlim(-0.5, W.shape[1] - 0.5)
    ax.set_ylim(W.shape[0] - 0.5, -0.5)
    ax.set_xticks(range(W.shape[1]))
    ax.set_yticks(range(W.shape[0]))
    labels = list(col_labels) if col_labels is not None else list(range(W.shape[1]))
    long = max((len(str(x)) for x in labels), default=0) > 4
    ax.set_xticklabels(labels, fontsize=7, rotation=45 if long else 0, ha="right" if long else "center")
    ax.set_yticklabels(row_labels if row_labels is not None else range(W.shape[0]), fontsize=7)
    ax.set_title(title, fontsize=9)


def _norm(a):
    a = np.asarray(a, dtype=np.float64)
    return a / a.sum(axis=-1, keepdims=True)


def run_hinton(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from models import LDHMM

    db, what = H.select_database(args.dataset, args.file, args.data_dir, args.n_sequences, args.seed)
    print(f"data: {what}", flush=True)
    if args.sequence >= len(db):
        raise ValueError(f"--sequence {args.sequence} is out of range (the database has {len(db)} sequences)")
    K = args.states
    settings = {"data": {"description": what, "fingerprint": H.data_fingerprint(db)}, "K": K,
                "guide": args.guide, "seed": args.seed, "max_iter": args.max_iter, "tol": args.tol}
    out = Path(args.out)
    digest = H.prepare_out_dir(out, "hinton", settings, force=args.force)
    model_path = out / "model.json"
    stamp = out / "model.config_hash"
    model = None
    if model_path.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        model = LDHMM.load(model_path)
        print(f"resumed: loaded the fitted model from {model_path}")
    if model is None:
        name = "LDHMM-PF" if args.guide == "pf" else "LDHMM-FF"
        H.seed_everything(args.seed)
        model = H.make_model(name, K, db.n_symbols, seed=args.seed, max_iter=args.max_iter, tol=args.tol,
                             verbose=not args.quiet)
        before = H._single_thread()
        try:
            model.fit(db.sequences)
        finally:
            import torch

            torch.set_num_threads(before)
        model.save(model_path)
        H.atomic_write_text(stamp, digest + "\n")
    seq = db[args.sequence]
    post = model.posterior([seq])
    states = [f"z{k}" for k in range(K)]
    vocab = list(db.vocabulary)
    fig, axes = plt.subplots(3, 2, figsize=(max(8, 0.5 * len(vocab) * 2 + 3), 9),
                             gridspec_kw={"height_ratios": [K, K, 1.5]})
    hinton(axes[0, 0], _norm(model.alpha_A_), states, states, "database: alpha_A (rows normalized)")
    hinton(axes[1, 0], _norm(model.beta_), states, vocab, "database: beta (rows normalized)")
    hinton(axes[2, 0], _norm(model.alpha_pi_)[None], ["pi"], states, "database: alpha_pi (normalized)")
    sid = db.ids[args.sequence] if db.ids is not None else str(args.sequence)
    hinton(axes[0, 1], _norm(post["g_A"][0]), states, states, f"sequence {sid}: gamma_A (posterior mean)")
    hinton(axes[1, 1], _norm(post["g_B"][0]), states, vocab, f"sequence {sid}: gamma_B (posterior mean)")
    hinton(axes[2, 1], _norm(post["g_pi"][0])[None], ["pi"], states, f"sequence {sid}: gamma_pi (posterior mean)")
    fig.suptitle(f"LDHMM-{args.guide.upper()}, K={K}: {db.name or 'data'} ({len(db)} sequences)", fontsize=10)
    fig.tight_layout()
    png = out / "hinton.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    params = {"alpha_pi": model.alpha_pi_.tolist(), "alpha_A": model.alpha_A_.tolist(), "beta": model.beta_.tolist(),
              "sequence": {"index": args.sequence, "id": sid, "tokens": [vocab[int(t)] for t in seq],
                           "g_pi": post["g_pi"][0].tolist(), "g_A": post["g_A"][0].tolist(),
                           "g_B": post["g_B"][0].tolist()},
              "n_iter": int(getattr(model, "n_iter_", 0) or 0)}
    H.atomic_write_text(out / "parameters.json", json.dumps(params, indent=1) + "\n")
    print(f"alpha_pi = {np.array2string(model.alpha_pi_, precision=3)}")
    print(f"results: {png}, {out}/parameters.json, {model_path}")
    return 0
