"""The ``ldhmm report`` page: one self-contained HTML file rendered from a model's description.

Everything on the page comes from the tables of
:class:`ldhmm.models.description.ModelDescription` (``model.describe(data)``), so a notebook
user and the page see the same numbers. The page needs no network: the style is inline, the
figures are inline SVG (:mod:`ldhmm.report_svg`), and there is no script. Every string that
comes from a user (event names, sequence ids, file names) is HTML-escaped.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from . import report_svg as svg
from .data.atomic import write_atomically

__all__ = ["render_report", "write_report", "html_table"]

#: Users listed as the most typical and as the most unusual.
N_LISTED = 5
#: Events listed per state under "the most likely events", and the decimals they are shown with.
TOP_LISTED, TOP_DIGITS = 5, 4
#: Events of the vocabulary shown in the emission heat map (the most likely overall).
HEATMAP_EVENTS = 20

_STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; max-width: 10em; overflow-wrap: anywhere; }
.scroll { max-width: 100%; overflow-x: auto; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figcaption { font-size: .85em; color: #555; max-width: 700px; }
.note { color: #555; font-size: .9em; } .swatch { display: inline-block; width: .9em; height: .9em; }
.row { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
.finding { background: #fff8e1; border-left: 4px solid #f0b400; padding: .4em .8em; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _cell(value, digits: int) -> str:
    if isinstance(value, (float, np.floating)):
        return f'<td class="num">{value:.{digits}f}</td>'
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f'<td class="num">{int(value)}</td>'
    return f"<td>{_e(value)}</td>"


def html_table(df: pd.DataFrame, digits: int = 3, index: bool = False, caption: str | None = None) -> str:
    """A DataFrame as an HTML table, every header and cell escaped, floats with ``digits`` decimals."""
    head = ([_e(df.index.name or "")] if index else []) + [_e(c) for c in df.columns]
    rows = []
    for label, row in zip(df.index, df.itertuples(index=False)):
        cells = ([f"<th>{_e(label)}</th>"] if index else []) + [_cell(v, digits) for v in row]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{_e(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table>{cap}<thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _figure(svg_text: str, caption: str) -> str:
    return f"<figure>{svg_text}<figcaption>{_e(caption)}</figcaption></figure>"


def _states_section(d) -> list[str]:
    K = len(d.states)
    B = d.emissions.pivot(index="state", columns="event", values="mean")
    B = B[d.emissions["event"].iloc[: len(B.columns)]]  # the vocabulary's order
    shown = B.mean(axis=0).sort_values(ascending=False, kind="stable").index[:HEATMAP_EVENTS]
    per_event = d.emissions.copy()
    per_event["rank"] = per_event.groupby("state")["mean"].rank(ascending=False, method="first")
    # most likely first within each state; an event that would read 0.0000 is no "likely event"
    top = per_event[(per_event["rank"] <= TOP_LISTED) & (per_event["mean"] >= 0.5 * 10**-TOP_DIGITS)]
    top = top.sort_values(["state", "rank"]).drop(columns=["rank", "state_name"])
    return [
        "<h2>States</h2>",
        f"<p>Each of the K = {K} states is named by its two most likely events (the database-level "
        "mean of the state's emission distribution B). <em>spread</em> is the standard deviation of "
        "that probability across users under the model; with data, <em>users_mean</em> and "
        "<em>users_spread</em> are the mean and standard deviation of the users' posterior means.</p>",
        html_table(d.states),
        _figure(
            svg.heatmap(B[shown].to_numpy(), list(d.states["name"]), list(shown), "emission probabilities"),
            f"Mean emission probability of each event in each state (the {len(shown)} most likely events).",
        ),
        f"<h3>The {TOP_LISTED} most likely events of each state, most likely first</h3>",
        '<p class="note">Events whose mean probability rounds to 0 are left out.</p>',
        html_table(top, TOP_DIGITS),
    ]


def _contexts_section(d) -> list[str]:
    """A model whose emissions see the events before: what each state emits after the most
    frequent contexts (nothing for other models)."""
    if d.contexts is None:
        return []
    return [
        "<h2>Contexts</h2>",
        "<p>The emissions of this model see the events before: each state has one emission row per "
        "context (the previous event, or a longer history). Above, a state's emission probabilities "
        "are its rows' means weighted by each context's <em>share</em> of the training events. "
        "Here, for the most frequent contexts, the events each state emits next; "
        "<em>concentration</em> is the sum of the row's Dirichlet prior: the larger, the more "
        "alike the users' rows.</p>",
        html_table(d.contexts),
    ]


def _structure_section(d) -> list[str]:
    names = list(d.states["name"])
    priors = (_summary_value(d.summary, "per-user priors") or "").rpartition(" (")[0]
    both = d.transitions.copy()
    for col in both.columns:
        both[col] = [f"{m:.3f} \u00b1 {s:.3f}" for m, s in zip(d.transitions[col], d.transition_spread[col])]
    return [
        "<h2>Initial and transition structure</h2>",
        '<div class="row">',
        _figure(
            svg.transition_diagram(
                d.transitions.to_numpy(), d.initial["mean"].to_numpy(), names, "transitions"
            ),
            "Arrows: mean transition probabilities of at least 0.05 (width by probability); in each "
            "state the probability of staying, below it the probability of starting there.",
        ),
        "<div>",
        "<h3>Initial probabilities</h3>",
        html_table(d.initial),
        "<h3>Transition probabilities (row: from, column: to; mean \u00b1 spread across users)</h3>",
        f'<p class="note">The spreads: {_e(priors)}.</p>' if priors else "",
        html_table(both, index=True),
        "</div></div>",
    ]


def _users_section(d) -> list[str]:
    users = d.users.sort_values("rank")
    # a user of one or two events is "typical" by a per-token bound that says little: the lists
    # hold the users of at least the median length
    shortest = max(2, int(np.median(users["length"])))
    listed = users[users["length"] >= shortest]
    listed = listed if len(listed) else users
    of_length = f"of {shortest} events or more (the median length)"
    clusters = d.clusters
    swatches = "".join(
        f'<span class="swatch" style="background:{svg.color(c)}"></span> group {int(c)} &nbsp; '
        for c in clusters["cluster"]
    )
    out = [
        "<h2>Users</h2>",
        f"<p>{len(users)} users, grouped by their posterior dynamics (k-means, seeded, of the posterior "
        "means of each user's transition and emission matrices and of their share of events in each "
        "state). The held-out bound per token (nats) measures how typical a user is: higher is "
        f"more typical.</p><p>{swatches}</p>",
        html_table(clusters),
        _figure(
            svg.scatter(
                users["length"],
                users["bound_per_token"],
                users["cluster"],
                "users",
                "events",
                "bound per token",
            ),
            "Each user: number of events against held-out bound per token, coloured by group.",
        ),
        f'<p class="note">The lists below hold the users {of_length}: a user of one or two events '
        "is typical or unusual by a bound per token that says little.</p>",
        '<div class="row"><div>',
        f"<h3>The {min(N_LISTED, len(listed))} most typical users</h3>",
        html_table(listed.head(N_LISTED)),
        "</div><div>",
        f"<h3>The {min(N_LISTED, len(listed))} most unusual users</h3>",
        html_table(listed.iloc[::-1].head(N_LISTED)),
        "</div></div>",
        "<h3>Decoded state paths</h3>",
        "<p>The most probable state of each event (Viterbi under the user's posterior mean "
        "parameters) for a few typical and unusual users; hover a box for its event.</p>",
    ]
    for (sid, role), path in d.examples.groupby(["sequence_id", "role"], sort=False):
        rank = int(path["rank"].iloc[0])
        out.append(
            _figure(
                svg.state_strip(list(path["event"]), list(path["state"]), f"user {sid}"),
                f"User {sid} ({role}, rank {rank}): "
                + " \u2192 ".join(f"{e} [S{s}]" for e, s in zip(path["event"], path["state"])),
            )
        )
    return out


def _next_event_section(d) -> list[str]:
    ne = d.next_event
    if ne is None or ne.empty:
        return ["<h2>Next-event prediction</h2>", '<p class="note">No user has two events or more.</p>']
    return [
        "<h2>Next-event prediction</h2>",
        f"<p>Each user's last event predicted from the events before it ({int(ne['n_users'].iloc[0])} "
        "users with two events or more). The baseline is fitted on the same prefixes, so neither "
        "model has seen the events it predicts. hit@1: the fraction predicted first; log loss in "
        "nats, lower is better.</p>",
        *_findings(d.summary, ("next event",)),
        '<div class="row">',
        html_table(ne, 4),
        _figure(
            svg.bar_chart(list(ne["model"]), ne["hit1"].to_numpy(), "hit@1", "hit@1"), "hit@1 per model."
        ),
        "</div>",
    ]


def render_report(description, title: str) -> str:
    """The page of a :class:`ldhmm.models.description.ModelDescription` as one HTML string.

    Parameters
    ----------
    description : ModelDescription
    title : str
        Shown as the page's title (e.g. the model file's name); escaped.
    """
    d = description
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        *_findings(d.summary),
        html_table(d.summary),
    ]
    parts += _states_section(d) + _contexts_section(d) + _structure_section(d)
    if d.users is not None:
        parts += _users_section(d) + _next_event_section(d)
    else:
        parts.append(
            '<p class="note">Users, their groups, decoded paths and next-event accuracy need data: '
            "<code>ldhmm report MODEL DATA --out report.html</code>.</p>"
        )
    history = d.history["elbo"].to_numpy()
    parts += [
        "<h2>The fit</h2>",
        _figure(
            svg.line_chart(history, "training ELBO", "EM iteration", "ELBO (nats)"),
            "Training ELBO per EM iteration of the kept run.",
        ),
        *_restarts_section(
            d.restarts,
            _summary_value(d.summary, "kept restart"),
            _summary_value(d.summary, "start of the kept run"),
            d.starts,
        ),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


#: The summary's fields said in words above it: whether the users share one HMM, whether they differ.
FINDINGS = ("per-user priors", "do the users differ")


def _findings(summary: pd.DataFrame, which=FINDINGS) -> list[str]:
    """The summary's fields ``which`` as sentences: the page's first paragraphs (the collapse
    diagnosis, :mod:`ldhmm.models.collapse`, and with data whether the users differ) and the
    next-event verdict above its table."""
    out = []
    for field in which:
        value = _summary_value(summary, field)
        if value:
            sentence = value.rpartition(" (")[0] if field == "per-user priors" else value
            out.append(f'<p class="finding"><strong>{_e(field)}:</strong> {_e(sentence)}.</p>')
    return out


def _summary_value(summary: pd.DataFrame, field: str) -> str | None:
    rows = summary.loc[summary["field"] == field, "value"]
    return str(rows.iloc[0]) if len(rows) else None


#: How the restarts table names a start that is no random restart (``start_kind_``).
START_LABELS = {"seeded": "symbol-seeded start", "hmm": "from the database-level HMM"}


def _restarts_section(
    restarts: pd.DataFrame | None,
    kept: str | None = None,
    start: str | None = None,
    starts: pd.DataFrame | None = None,
) -> list[str]:
    """Every start: a table of each run's start (a restart's number and seed, or the
    symbol-seeded start, or the database-level HMM), EM iterations and final ELBO, and with
    several runs their ELBO per iteration in one chart (the kept one thick); where none of them
    was kept, what was (``kept``: the summary's "kept restart"; ``start``: its "start of the kept
    run", the model's ``start_kind_``; ``starts``: :func:`ldhmm.models.description.start_table`)."""
    if restarts is None:
        return ['<p class="note">The restarts are not recorded in this model file.</p>']
    starts = starts if starts is not None else pd.DataFrame(columns=["start", "iteration", "elbo", "kept"])
    runs = [(str(r), run["seed"].iloc[0], run) for r, run in restarts.groupby("restart", sort=True)]
    runs += [(START_LABELS.get(k, k), "", run) for k, run in starts.groupby("start", sort=False)]
    if not runs:
        if kept and start in ("hmm", "seeded"):  # no run of the fit was recorded
            return [f'<p class="note">No restart was kept: {html.escape(kept)}.</p>']
        return ['<p class="note">No restarts: a fit from given parameters, or the SVI route.</p>']
    table = pd.DataFrame(
        {
            "start": [label for label, _, _ in runs],
            "seed": [seed for _, seed, _ in runs],
            "EM iterations": [int(run["iteration"].max()) for _, _, run in runs],
            "final ELBO": [float(run["elbo"].iloc[-1]) for _, _, run in runs],
            "kept": ["yes" if run["kept"].any() else "" for _, _, run in runs],
        }
    )
    parts = [html_table(table, caption="Every start of the fit (it keeps the highest final ELBO)")]
    if not (table["kept"] == "yes").any() and kept:
        parts.append(f'<p class="note">No start of this table was kept: {html.escape(kept)}.</p>')
    if len(table) > 1:
        chosen = np.flatnonzero(table["kept"] == "yes")
        parts.append(
            _figure(
                svg.line_chart(
                    [run["elbo"].to_numpy() for _, _, run in runs],
                    "training ELBO of every start",
                    "EM iteration",
                    "ELBO (nats)",
                    highlight=int(chosen[0]) if chosen.size else None,
                ),
                "Training ELBO per EM iteration of every start; the kept one drawn thick.",
            )
        )
    return parts


def write_report(description, path, title: str) -> None:
    """Write :func:`render_report` to ``path`` (a temporary file renamed into place)."""
    page = render_report(description, title)
    write_atomically(path, lambda f: f.write(page))
