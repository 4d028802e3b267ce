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
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..models import LDHMM
from .datasets import data_fingerprint, select_database
from .lineup import make_model
from .tasks import (
    atomic_savefig,
    atomic_write_text,
    holds_out_dir_lock,
    prepare_out_dir,
    seed_everything,
    single_thread,
)

__all__ = ["run_hinton", "hinton"]


def hinton(ax, matrix, row_labels=None, col_labels=None, title=""):
    """Draw a Hinton diagram of a non-negative matrix: squares with area proportional to value."""
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


@holds_out_dir_lock
def run_hinton(
    dataset=None,
    file=None,
    data_dir=None,
    n_sequences=None,
    states=6,
    sequence=0,
    guide="pf",
    out="results/hinton",
    quiet=False,
    seed=0,
    max_iter=None,
    tol=None,
    force=False,
) -> int:
    """Run ``ldhmm hinton``: fit LDHMM (or reuse the saved fit) and draw the diagrams.

    Parameters
    ----------
    dataset : {"entree", "msnbc", "splice", "synthetic"}, optional
        Default: entree when its files are in the data directory, else synthetic.
    file : str or Path, optional
        A user's sequence file.
    data_dir : str or Path, optional
        Data directory (default ``$LDHMM_DATA``).
    n_sequences : int, optional
        Use a seeded random sample of this many sequences.
    states : int
        K (6 in the paper).
    sequence : int
        Index of the sequence whose variational parameters are drawn.
    guide : {"pf", "ff"}
        Variational form of q(Z).
    out : str or Path
        Output directory.
    quiet : bool
        No progress bar.
    seed, max_iter, tol, force
        As for :func:`ldhmm.experiments.compare.compare`.

    Returns
    -------
    int
        0. Writes ``hinton.png``, ``parameters.json`` and the fitted ``model.json`` under ``out``.
    """
    db, what = select_database(dataset, file, data_dir, n_sequences, seed)
    print(f"data: {what}", flush=True)
    if sequence >= len(db):
        raise ValueError(f"--sequence {sequence} is out of range (the database has {len(db)} sequences)")
    K = states
    settings = {
        "data": {"description": what, "fingerprint": data_fingerprint(db)},
        "K": K,
        "guide": guide,
        "seed": seed,
        "max_iter": max_iter,
        "tol": tol,
    }
    out = Path(out)
    digest = prepare_out_dir(out, "hinton", settings, force=force)
    model_path = out / "model.json"
    stamp = out / "model.config_hash"
    model = None
    if model_path.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        model = LDHMM.load(model_path)
        print(f"resumed: loaded the fitted model from {model_path}")
    if model is None:
        name = "LDHMM-PF" if guide == "pf" else "LDHMM-FF"
        seed_everything(seed)
        model = make_model(name, K, db.n_symbols, seed=seed, max_iter=max_iter, tol=tol, verbose=not quiet)
        before = single_thread()
        try:
            model.fit(db.sequences)
        finally:
            torch.set_num_threads(before)
        model.save(model_path)
        atomic_write_text(stamp, digest + "\n")
    seq = db[sequence]
    post = model.posterior([seq])
    states = [f"z{k}" for k in range(K)]
    vocab = list(db.vocabulary)
    # a bare Figure (not pyplot): no global backend or figure registry to touch
    fig = Figure(figsize=(max(8, 0.5 * len(vocab) * 2 + 3), 9))
    axes = fig.subplots(3, 2, gridspec_kw={"height_ratios": [K, K, 1.5]})
    hinton(axes[0, 0], _norm(model.alpha_A_), states, states, "database: alpha_A (rows normalized)")
    hinton(axes[1, 0], _norm(model.beta_), states, vocab, "database: beta (rows normalized)")
    hinton(axes[2, 0], _norm(model.alpha_pi_)[None], ["pi"], states, "database: alpha_pi (normalized)")
    sid = db.ids[sequence] if db.ids is not None else str(sequence)
    hinton(axes[0, 1], _norm(post["g_A"][0]), states, states, f"sequence {sid}: gamma_A (posterior mean)")
    hinton(axes[1, 1], _norm(post["g_B"][0]), states, vocab, f"sequence {sid}: gamma_B (posterior mean)")
    hinton(
        axes[2, 1], _norm(post["g_pi"][0])[None], ["pi"], states, f"sequence {sid}: gamma_pi (posterior mean)"
    )
    fig.suptitle(f"LDHMM-{guide.upper()}, K={K}: {db.name or 'data'} ({len(db)} sequences)", fontsize=10)
    fig.tight_layout()
    png = out / "hinton.png"
    atomic_savefig(fig, png, dpi=120)
    params = {
        "alpha_pi": model.alpha_pi_.tolist(),
        "alpha_A": model.alpha_A_.tolist(),
        "beta": model.beta_.tolist(),
        "sequence": {
            "index": sequence,
            "id": sid,
            "tokens": [vocab[int(t)] for t in seq],
            "g_pi": post["g_pi"][0].tolist(),
            "g_A": post["g_A"][0].tolist(),
            "g_B": post["g_B"][0].tolist(),
        },
        "n_iter": int(getattr(model, "n_iter_", 0) or 0),
    }
    atomic_write_text(out / "parameters.json", json.dumps(params, indent=1) + "\n")
    print(f"alpha_pi = {np.array2string(model.alpha_pi_, precision=3)}")
    print(f"results: {png}, {out}/parameters.json, {model_path}")
    return 0
