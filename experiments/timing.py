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


from . import harness as H
from .compare import _nonneg_int, _positive_int

__all__ = ["register", "run_timing", "timing_task"]

TIMING_MODELS = ("LDHMM-FF", "LDHMM-PF")


def register(subparsers):
    p = subparsers.add_parser(
        "timing", help="training time of LDHMM-FF vs LDHMM-PF against K (Figure 6)",
        description="Wall-clock training time of LDHMM-FF and LDHMM-PF for each K on Entree and MSNBC "
                    "(the paper's Figure 6).")
    p.add_argument("--dataset", nargs="+", default=["entree", "msnbc"],
                   choices=["entree", "msnbc", "synthetic"], help="data sets (default: entree msnbc)")
    p.add_argument("--data-dir", default=None, help="data directory (default: $LDHMM_DATA)")
    p.add_argument("--states", nargs="+", default=["2..6"], metavar="K", help="K values (default 2..6)")
    p.add_argument("--n-sequences", type=_nonneg_int, default=1000,
                   help="msnbc/synthetic: seeded sample size (default 1000; 0 = the whole msnbc subset)")
    p.add_argument("--models", nargs="+", default=list(TIMING_MODELS), metavar="NAME",
                   help="models to time (default LDHMM-FF LDHMM-PF; any registry name works)")
    p.add_argument("--out", default="results/timing", help="output directory (default results/timing)")
    p.add_argument("--jobs", type=_positive_int, default=1, help="worker processes (default 1: clean timings)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed (default 0)")
    p.add_argument("--max-iter", type=_positive_int, default=None, help="EM iterations at most (default 100)")
    p.add_argument("--tol", type=float, default=None, help="EM relative tolerance (default 1e-4)")
    p.add_argument("--force", action="store_true", help="reuse an --out of another configuration")
    p.set_defaults(func=run_timing)
    return p


def timing_task(task, payload) -> dict:
    db = payload["dbs"][task["dataset"]]
    s = payload["settings"]
    H.seed_everything(s["seed"])
    model = H.make_model(task["model"], int(task["K"]), db.n_symbols, seed=s["seed"],
                         max_iter=s["max_iter"], tol=s["tol"])
    seqs = db.sequences
    _, secs = H.timed(model.fit, seqs)
    n_iter = int(getattr(model, "n_iter_", 0) or 0)
    hist = getattr(model, "elbo_history_", None)
    final = float(hist[-1]) if hist is not None and len(hist) else float("nan")
    return {"fit_seconds": secs, "n_iter": n_iter, "seconds_per_iter": secs / n_iter if n_iter else float("nan"),
            "n_sequences": len(seqs), "n_tokens": int(sum(len(x) for x in seqs)), "final_train_elbo": final,
            "converged": bool(getattr(model, "converged_", False))}


def run_timing(args) -> int:
    import pandas as pd

    models = H.resolve_models(args.models)
    states = H.parse_states(args.states)
    dbs, described = {}, {}
    for name in dict.fromkeys(args.dataset):
        n = None
        if name in ("msnbc", "synthetic") and args.n_sequences:
            n = args.n_sequences
        db, what = H.select_database(name, None, args.data_dir, n, args.seed)
        dbs[name], described[name] = db, what
        print(f"data: {what}", flush=True)
    settings = {"data": {k: {"description": described[k], "fingerprint": H.data_fingerprint(v)}
                         for k, v in dbs.items()},
                "seed": args.seed, "max_iter": args.max_iter, "tol": args.tol}
    out = Path(args.out)
    digest = H.prepare_out_dir(out, "timing", settings, force=args.force,
                               extra={"models": models, "states": states, "jobs": args.jobs})
    tasks = [{"key": f"{d}__{m}__K{K}", "dataset": d, "model": m, "K": K}
             for d in dbs for K in states for m in models]
    records, errors = H.run_tasks(tasks, timing_task, {"dbs": dbs, "settings": settings}, out, digest,
                                  jobs=args.jobs, quiet=args.quiet, desc="timing")
    for e in errors:
        print(f"ldhmm timing: warning: task failed: {e}", file=sys.stderr)
    if not records:
        raise RuntimeError("no task finished")
    cols = ["dataset", "model", "K", "fit_seconds", "n_iter", "seconds_per_iter", "converged",
            "n_sequences", "n_tokens", "final_train_elbo"]
    df = pd.DataFrame(records)[cols]
    df.to_csv(out / "timing.csv", index=False)
    lines = ["# ldhmm timing", "", *[f"- {d}: {described[d]}" for d in dbs], "",
             f"EM max_iter {args.max_iter or 'model default (100)'}, tol {args.tol or 'model default (1e-4)'}; "
             f"jobs {args.jobs}. Cells: fit seconds (EM iterations).", ""]
    for d in dbs:
        dd = df[df["dataset"] == d]
        lines += [f"## {d}", "", "| model | " + " | ".join(f"K={K}" for K in states) + " |",
                  "|---|" + "---|" * len(states)]
        for m in models:
            cells = []
            for K in states:
                r = dd[(dd["model"] == m) & (dd["K"] == K)]
                cells.append(f"{r['fit_seconds'].iloc[0]:.1f} ({int(r['n_iter'].iloc[0])})" if len(r) else "n/a")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    md = "\n".join(lines)
    H.atomic_write_text(out / "timing.md", md)
    plot_timing(df, list(dbs), models, states, out / "timing_vs_K.png")
    print(md)
    print(f"results: {out}/timing.csv, timing.md, timing_vs_K.png")
    return 1 if errors else 0


def plot_timing(df, datasets, models, states, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
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
    fig.savefig(path, dpi=120)
    plt.close(fig)
