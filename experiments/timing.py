"""``ldhmm timing``: training time of LDHMM-FF against LDHMM-PF for a list of K (Figure 6).

Each (data set, model, K) fits the model on the whole (sub)database once and records the
wall-clock seconds of ``fit``, the EM iterations and the seconds per iteration (the
paper's point is that PF may converge in fewer iterations, so total time is not simply
the per-iteration cost). Entree: the paper's 422 sessions; MSNBC: a seeded sample of
``--n-sequences`` (default 1000) of the paper's 31,071-user subset (``--n-sequences 0``:
all of it). ``--jobs`` > 1 runs fits side by side, which distorts times: keep 1 for the
figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from .datasets import data_fingerprint, select_database
from .lineup import make_model, resolve_models, takes_effort
from .tasks import (
    atomic_savefig,
    atomic_write_csv,
    atomic_write_text,
    holds_out_dir_lock,
    parse_states,
    prepare_out_dir,
    run_tasks,
    seed_everything,
    timed,
)

__all__ = ["run_timing", "timing_task", "TIMING_MODELS"]

TIMING_MODELS = ("LDHMM-FF", "LDHMM-PF")


def timing_task(task, payload) -> dict:
    db = payload["dbs"][task["dataset"]]
    s = payload["settings"]
    seed_everything(s["seed"])
    # Figure 6 times the two algorithms, not the fitting policy: one fit each from the same
    # random start (no restarts; an LDHMM-family FF fit not started from the PF fit, which only
    # that family's ``init`` says; another registry model takes no ``init``).
    from_random = {"init": "random"} if takes_effort(task["model"]) else {}
    model = make_model(
        task["model"],
        int(task["K"]),
        db.n_symbols,
        seed=s["seed"],
        max_iter=s["max_iter"],
        tol=s["tol"],
        n_init=1,
        **from_random,
    )
    seqs = db.sequences
    _, secs = timed(model.fit, seqs)
    n_iter = int(getattr(model, "n_iter_", 0) or 0)
    hist = getattr(model, "elbo_history_", None)
    final = float(hist[-1]) if hist is not None and len(hist) else float("nan")
    return {
        "fit_seconds": secs,
        "n_iter": n_iter,
        "seconds_per_iter": secs / n_iter if n_iter else float("nan"),
        "n_sequences": len(seqs),
        "n_tokens": int(sum(len(x) for x in seqs)),
        "final_train_elbo": final,
        "converged": bool(getattr(model, "converged_", False)),
    }


@holds_out_dir_lock
def run_timing(
    dataset=("entree", "msnbc"),
    data_dir=None,
    states=("2..6",),
    n_sequences=1000,
    models=TIMING_MODELS,
    out="results/timing",
    jobs=1,
    quiet=False,
    seed=0,
    max_iter=None,
    tol=None,
    force=False,
) -> int:
    """Run ``ldhmm timing``: fit each (data set, model, K) once on the whole database and time it.

    Parameters
    ----------
    dataset : list of {"entree", "msnbc", "synthetic"}
        Data sets.
    data_dir : str or Path, optional
        Data directory (default ``$LDHMM_DATA``).
    states : list of int or str
        K values; strings may be ranges like ``"2..6"``.
    n_sequences : int
        msnbc/synthetic: seeded sample size (0: the whole msnbc subset).
    models : list of str
        Harness names (default LDHMM-FF and LDHMM-PF).
    out : str or Path
        Output directory.
    jobs : int
        Worker processes (1 for clean timings).
    quiet, seed, max_iter, tol, force
        As for :func:`ldhmm.experiments.compare.compare`.

    Returns
    -------
    int
        0 when every task finished, 1 when some failed. Writes ``timing.csv``, ``timing.md``
        and ``timing_vs_K.png`` under ``out``.
    """
    models = resolve_models(models)
    states = parse_states(states)
    dbs, described = {}, {}
    for name in dict.fromkeys(dataset):
        n = None
        if name in ("msnbc", "synthetic") and n_sequences:
            n = n_sequences
        db, what = select_database(name, None, data_dir, n, seed)
        dbs[name], described[name] = db, what
        print(f"data: {what}", flush=True)
    settings = {
        "data": {
            k: {"description": described[k], "fingerprint": data_fingerprint(v)} for k, v in dbs.items()
        },
        "seed": seed,
        "max_iter": max_iter,
        "tol": tol,
    }
    out = Path(out)
    digest = prepare_out_dir(
        out, "timing", settings, force=force, extra={"models": models, "states": states, "jobs": jobs}
    )
    tasks = [
        {"key": f"{d}__{m}__K{K}", "dataset": d, "model": m, "K": K}
        for d in dbs
        for K in states
        for m in models
    ]
    records, errors = run_tasks(
        tasks,
        timing_task,
        {"dbs": dbs, "settings": settings},
        out,
        digest,
        jobs=jobs,
        quiet=quiet,
        desc="timing",
    )
    for e in errors:
        print(f"ldhmm timing: warning: task failed: {e}", file=sys.stderr)
    if not records:
        raise RuntimeError("no task finished")
    cols = [
        "dataset",
        "model",
        "K",
        "fit_seconds",
        "n_iter",
        "seconds_per_iter",
        "converged",
        "n_sequences",
        "n_tokens",
        "final_train_elbo",
    ]
    df = pd.DataFrame(records)[cols]
    atomic_write_csv(df, out / "timing.csv")
    lines = [
        "# ldhmm timing",
        "",
        *[f"- {d}: {described[d]}" for d in dbs],
        "",
        f"EM max_iter {max_iter or 'model default (100)'}, tol {tol or 'model default (1e-4)'}; "
        f"jobs {jobs}; one fit per cell from the same random start (n_init=1, init='random'). "
        "Cells: fit seconds (EM iterations).",
        "",
    ]
    for d in dbs:
        dd = df[df["dataset"] == d]
        lines += [
            f"## {d}",
            "",
            "| model | " + " | ".join(f"K={K}" for K in states) + " |",
            "|---|" + "---|" * len(states),
        ]
        for m in models:
            cells = []
            for K in states:
                r = dd[(dd["model"] == m) & (dd["K"] == K)]
                cells.append(
                    f"{r['fit_seconds'].iloc[0]:.1f} ({int(r['n_iter'].iloc[0])})" if len(r) else "n/a"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    md = "\n".join(lines)
    atomic_write_text(out / "timing.md", md)
    plot_timing(df, list(dbs), models, states, out / "timing_vs_K.png")
    print(md)
    print(f"results: {out}/timing.csv, timing.md, timing_vs_K.png")
    return 1 if errors else 0


def plot_timing(df, datasets, models, states, path):
    """Training seconds against K, one panel per data set (the paper's Figure 6)."""
    # a bare Figure (not pyplot): no global backend or figure registry to touch
    fig = Figure(figsize=(5.5 * len(datasets), 4))
    axes = fig.subplots(1, len(datasets), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        dd = df[df["dataset"] == d]
        for m in models:
            r = dd[dd["model"] == m].sort_values("K")
            if len(r):
                ax.plot(r["K"], r["fit_seconds"], marker="o", label=m)
        ax.set_title(f"{d}: training time")
        ax.set_xlabel("K (hidden states)")
        ax.set_ylabel("seconds")
        ax.set_xticks(states)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
