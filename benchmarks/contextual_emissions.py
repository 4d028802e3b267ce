"""Benchmark: LDHMM with contextual emissions against LDHMM-PF and the Markov chains, held out.

For each data set, one seeded split (``--held-out`` of the sequences held out), every model
fitted on the rest in this process, one after another:

* ``LDHMM-PF`` (``LDHMM(K)``, the defaults) and ``LDHMM-PF-ctx1`` / ``-ctx3``
  (``ContextualLDHMM(K, emission_context=1 or 3)``): held-out ``log p(x)`` by importance
  sampling (``--is-samples`` draws per sequence) and the held-out bound;
* ``HMM`` (the harness's HMM baseline: hmmlearn's ``CategoricalHMM`` with its restarts) and
  ``HMM-ctx1`` (``ContextualHMM(K, emission_context=1)``: an HMM whose emissions see the previous
  event): exact ``log p(x)``;
* ``HMM-ctx1-userB``, ``HMMV-ctx1``, ``VBHMM-ctx1``: the order-1 contexts under other sharings
  (``ContextualLDHMM(sharing=...)``: pi and A point with B per user; HMMV's; VBHMM's):
  importance-sampled ``log p(x)`` and the bound;
* ``MARKOV1`` / ``MARKOV3`` (``SmoothedMarkovChain``, smoothing chosen on the training data:
  the best-smoothed first-order chain, and the interpolated order-3 chain): exact ``log p(x)``.

Printed per model: held-out log p(x) per event, its difference to the contextual order-1
model's with the standard error of that difference over the held-out sequences (paired, by
sequence), the bound per event (LDHMM models), fit CPU seconds (one numba thread:
``NUMBA_NUM_THREADS=1``) and EM iterations.

Data sets (``--data``):

* ``shop``: a synthetic shop click log, :func:`shop_log`: short sessions through a funnel
  (home, catalog, search, product, reviews, cart, delivery, payment, confirmation, account,
  help, exit), whose next page depends on the page before and on the user's hidden intent
  (browsing, comparing, buying), each user with pages of their own habits (Dirichlet around the
  funnel's rows). Drawn, not recorded: it shows the variant where the data is as click streams
  are said to be, not that real logs are so;
* ``msnbc-short``: the first ``--n`` sequences of length 2..8 of the full MSNBC file (short
  sessions, V = 17);
* ``msnbc``, ``entree``: the paper's subsets (``load_paper_subset``), ``splice``: all three
  classes' sequences; the first ``--n`` of them.

Run::

    NUMBA_NUM_THREADS=1 python benchmarks/contextual_emissions.py --data-dir ../shared/data \\
        --data shop msnbc-short --states 4
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldhmm.baselines.markov_smoothed import SmoothedMarkovChain
from ldhmm.data import SequenceDatabase, load_msnbc, load_paper_subset, load_splice
from ldhmm.inference.sharing import HMMV_SHARING, POINT, SEQUENCE, VBHMM_SHARING, ParameterSharing
from ldhmm.models import LDHMM
from ldhmm.models.contextual import ContextualLDHMM
from ldhmm.models.contextual_hmm import ContextualHMM
from ldhmm.models.registry import get_spec

#: pi and A point estimates, B per sequence with a learned prior: an HMM whose emissions see the
#: previous event, each user with rows of their own.
USER_EMISSIONS = ParameterSharing(pi=POINT, A=POINT, B=SEQUENCE)

#: The shop log's pages, in the order of the funnel.
SHOP_PAGES = (
    "home",
    "catalog",
    "search",
    "product",
    "reviews",
    "cart",
    "delivery",
    "payment",
    "confirmation",
    "account",
    "help",
    "exit",
)


def _funnel_rows(intent: int) -> np.ndarray:
    """The base next-page table (V + 1 rows: the page before, or the start; V columns) of a
    user intent: 0 browsing, 1 comparing, 2 buying."""
    V = len(SHOP_PAGES)
    idx = {p: i for i, p in enumerate(SHOP_PAGES)}
    rows = np.full((V + 1, V), 0.05)

    def go(before, weights):
        r = V if before is None else idx[before]
        for page, w in weights.items():
            rows[r, idx[page]] += w

    start = [
        {"home": 3, "catalog": 2, "search": 1},
        {"search": 3, "product": 2},
        {"home": 1, "cart": 2, "product": 2},
    ]
    go(None, start[intent])
    go("home", [{"catalog": 4, "search": 1}, {"search": 4, "catalog": 1}, {"cart": 2, "account": 2}][intent])
    go("catalog", [{"catalog": 3, "product": 3, "exit": 1}, {"product": 4}, {"product": 4}][intent])
    go("search", [{"catalog": 2, "product": 2}, {"product": 5}, {"product": 5}][intent])
    go(
        "product",
        [{"catalog": 3, "product": 2, "exit": 2}, {"reviews": 4, "product": 3}, {"cart": 6}][intent],
    )
    go("reviews", [{"product": 3, "exit": 1}, {"product": 4, "search": 2}, {"cart": 4}][intent])
    go("cart", [{"exit": 3, "catalog": 2}, {"product": 2, "exit": 2}, {"delivery": 6}][intent])
    go("delivery", [{"exit": 2}, {"cart": 2, "exit": 2}, {"payment": 6}][intent])
    go("payment", [{"exit": 2}, {"help": 2, "exit": 2}, {"confirmation": 6, "help": 1}][intent])
    go("confirmation", [{"exit": 3}, {"exit": 3}, {"account": 2, "exit": 3}][intent])
    go("account", [{"home": 2, "exit": 2}, {"home": 2}, {"exit": 2, "home": 1}][intent])
    go("help", [{"exit": 2}, {"home": 2}, {"payment": 3}][intent])
    go("exit", [{"home": 1}, {"home": 1}, {"home": 1}][intent])
    return rows / rows.sum(1, keepdims=True)


def shop_log(n_users: int, seed: int = 0, concentration: float = 20.0, mean_length: float = 7.0):
    """A synthetic shop click log (see the module docstring): one session per user, at least 2
    pages, geometric lengths of mean ``mean_length``, ending at ``exit`` or the length.

    Each user draws a sticky intent chain (browsing, comparing, buying) and, per intent and page
    before, a next-page row ``Dir(concentration * funnel row)``."""
    rng = np.random.default_rng(seed)
    V = len(SHOP_PAGES)
    base = np.stack([_funnel_rows(i) for i in range(3)])  # (3, V + 1, V)
    moves = np.array([[0.85, 0.1, 0.05], [0.1, 0.8, 0.1], [0.05, 0.1, 0.85]])
    exit_page = SHOP_PAGES.index("exit")
    sequences = []
    for _ in range(n_users):
        rows = np.stack([[rng.dirichlet(concentration * r) for r in base[i]] for i in range(3)])
        length = max(2, int(rng.geometric(1.0 / mean_length)))
        z = int(rng.choice(3, p=[0.5, 0.3, 0.2]))
        before, seq = V, []
        for t in range(length):
            page = int(rng.choice(V, p=rows[z, before]))
            seq.append(page)
            if page == exit_page and t >= 1:
                break
            before = page
            z = int(rng.choice(3, p=moves[z]))
        sequences.append(np.array(seq, dtype=np.int64))
    return SequenceDatabase.from_sequences(sequences, list(SHOP_PAGES), name="shop")


def load(name: str, n: int, data_dir, seed: int) -> SequenceDatabase:
    if name == "shop":
        return shop_log(n, seed=seed)
    if name == "msnbc-short":
        db = load_msnbc(data_dir, min_length=2, max_length=8)
        return db.subset(np.arange(min(n, len(db))))
    db = load_splice(data_dir) if name == "splice" else load_paper_subset(name, data_dir=data_dir)
    return db if n >= len(db) else db.subset(np.arange(n))  # its first n (all of a smaller one)


def split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    cut = int(round(n * (1 - fraction)))
    return np.sort(order[:cut]), np.sort(order[cut:])


def models(K: int, V: int, seed: int, smoothing: float | None = None) -> dict:
    """The compared models by name; ``smoothing``: the contextual variants' ``context_smoothing``
    (None: their default)."""
    extra = {} if smoothing is None else {"context_smoothing": smoothing}
    return {
        "LDHMM-PF": lambda: LDHMM(K, n_symbols=V, seed=seed),
        "LDHMM-PF-ctx1": lambda: ContextualLDHMM(K, n_symbols=V, emission_context=1, seed=seed, **extra),
        "LDHMM-PF-ctx3": lambda: ContextualLDHMM(K, n_symbols=V, emission_context=3, seed=seed, **extra),
        "HMM": lambda: get_spec("HMM").make(K, V, seed=seed),
        "HMM-ctx1": lambda: ContextualHMM(K, n_symbols=V, emission_context=1, seed=seed, **extra),
        # the same contexts under other sharings (ContextualLDHMM(sharing=...)): the chain shared
        # (pi, A point) with each user's emission rows, HMMV's and VBHMM's
        "HMM-ctx1-userB": lambda: ContextualLDHMM(
            K, n_symbols=V, emission_context=1, seed=seed, sharing=USER_EMISSIONS, **extra
        ),
        "HMMV-ctx1": lambda: ContextualLDHMM(
            K, n_symbols=V, emission_context=1, seed=seed, sharing=HMMV_SHARING, **extra
        ),
        "VBHMM-ctx1": lambda: ContextualLDHMM(
            K, n_symbols=V, emission_context=1, seed=seed, sharing=VBHMM_SHARING, **extra
        ),
        "MARKOV1": lambda: SmoothedMarkovChain(n_symbols=V, order=1),
        "MARKOV3": lambda: SmoothedMarkovChain(n_symbols=V, order=3),
    }


def lineup(names: list, smoothings: list) -> list:
    """(label, name, smoothing) of every run: each contextual variant once per smoothing
    (labelled ``name s=value`` where several are compared), the others once."""
    out = []
    for name in names:
        if "ctx" in name and len(smoothings) > 1:
            out += [(f"{name} s={value:g}", name, value) for value in smoothings]
        else:
            out.append((name, name, smoothings[0] if smoothings else None))
    return out


def held_out_scores(model, held, is_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(log p(x) per sequence, the bound per sequence or None for an exact model)."""
    if model.score_kind == "exact":
        return model.score_samples(held), None
    return model.log_marginal_is(held, n_samples=is_samples, seed=seed), model.score_samples(held)


def table(rows: list, reference: str) -> str:
    """The printed table: one line per (data, K, model); differences to ``reference``'s."""
    out = [
        "| data | K | model | held-out log p(x)/event | minus ctx1 (± s.e.) | bound/event | fit CPU s "
        "| iters |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["data"], r["K"]), {})[r["model"]] = r
    for (data, K), cell in by_cell.items():
        ref = cell.get(reference)
        for name, r in cell.items():
            n = r["events"]
            diff = "—"
            if ref is not None and name != reference:
                d = r["log_p"] - ref["log_p"]
                se = np.sqrt(len(d)) * d.std(ddof=1) / n
                diff = f"{d.sum() / n:+.4f} ± {se:.4f}"
            bound = "exact" if r["bound"] is None else f"{r['bound'].sum() / n:.4f}"
            out.append(
                f"| {data} | {K} | {name} | {r['log_p'].sum() / n:.4f} | {diff} | {bound} | "
                f"{r['cpu']:.1f} | {r['iters']} |"
            )
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="the UCI data (default $LDHMM_DATA)")
    parser.add_argument(
        "--data", nargs="+", default=["shop", "msnbc-short"], help="shop, msnbc-short, msnbc, entree, splice"
    )
    parser.add_argument("--n", type=int, default=3751, help="sequences per data set (default 3751)")
    parser.add_argument("--states", type=int, nargs="+", default=[4], help="K values (default 4)")
    parser.add_argument("--held-out", type=float, default=0.2, help="fraction held out (default 0.2)")
    parser.add_argument("--is-samples", type=int, default=200, help="IS draws per sequence (default 200)")
    parser.add_argument(
        "--models",
        nargs="+",
        default=["LDHMM-PF", "LDHMM-PF-ctx1", "LDHMM-PF-ctx3", "MARKOV1", "MARKOV3"],
    )
    parser.add_argument(
        "--context-smoothing",
        type=float,
        nargs="+",
        default=None,
        metavar="S",
        help="the contextual variants' context_smoothing (several: each variant once per value; "
        "default: the model's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    runs = lineup(args.models, args.context_smoothing or [None])
    rows = []
    for name in args.data:
        db = load(name, args.n, args.data_dir, args.seed)
        train_idx, held_idx = split(len(db), args.held_out, args.seed)
        train = db.subset(train_idx)
        every = db.sequences  # a property that builds the list: once
        held = [every[i] for i in held_idx]
        events = sum(len(s) for s in held)
        print(
            f"{name}: {len(train)} training sequences, {len(held)} held out ({events} events), "
            f"V = {db.n_symbols}"
        )
        for K in args.states:
            for label, model_name, smoothing in runs:
                model = models(K, db.n_symbols, args.seed, smoothing)[model_name]()
                t0 = time.process_time()
                model.fit(train.sequences)
                cpu = time.process_time() - t0
                log_p, bound = held_out_scores(model, held, args.is_samples, args.seed)
                iters = getattr(model, "n_iter_", "—")
                rows.append(
                    dict(
                        data=name,
                        K=K,
                        model=label,
                        log_p=log_p,
                        bound=bound,
                        events=events,
                        cpu=cpu,
                        iters=iters,
                    )
                )
                print(f"  K={K} {label}: {log_p.sum() / events:.4f} per event, {cpu:.1f} CPU s", flush=True)
    print()
    print(table(rows, next((label for label, name, _ in runs if name == "LDHMM-PF-ctx1"), "LDHMM-PF-ctx1")))


if __name__ == "__main__":
    main()
