"""The figures of ``ldhmm report`` as inline SVG strings: no plotting library, no network, no
script; every label is escaped (event names are a user's strings).

Each function takes plain arrays and labels and returns one ``<svg>`` element.
"""

from __future__ import annotations

import html
import math

import numpy as np

__all__ = [
    "PALETTE",
    "color",
    "line_chart",
    "heatmap",
    "transition_diagram",
    "bar_chart",
    "scatter",
    "state_strip",
]

#: Colours of states and clusters (colour-blind-safe Tableau 10), cycled past ten.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
_FONT = 'font-family="sans-serif"'


def color(i: int) -> str:
    """The colour of state or cluster ``i``."""
    return PALETTE[int(i) % len(PALETTE)]


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _short(text, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{_e(title)}">'
        f"<title>{_e(title)}</title>" + "".join(body) + "</svg>"
    )


def _text(x, y, text, size=11, anchor="start", extra="") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {_FONT} {extra}>'
        f"{_e(text)}</text>"
    )


def _axes(x0, y0, w, h, lo, hi, x_label, y_label) -> list[str]:
    """Frame, y ticks at lo/mid/hi and the axis labels of a plot area at (x0, y0), size w x h."""
    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for frac in (0.0, 0.5, 1.0):
        value = lo + frac * (hi - lo)
        y = y0 + h - frac * h
        out.append(_text(x0 - 4, y + 4, f"{value:.4g}", 10, "end"))
    out.append(_text(x0 + w / 2, y0 + h + 30, x_label, 11, "middle"))
    out.append(_text(12, y0 + h / 2, y_label, 11, "middle", f'transform="rotate(-90 12 {y0 + h / 2:.1f})"'))
    return out


def _range(values) -> tuple[float, float]:
    lo, hi = float(np.min(values)), float(np.max(values))
    return (lo - 0.5, hi + 0.5) if hi == lo else (lo, hi)


def line_chart(y, title: str, x_label: str, y_label: str, width=560, height=260, highlight=None) -> str:
    """``y`` against ``1..len(y)`` (e.g. the ELBO per EM iteration); ``y`` may be a list of
    series (e.g. every restart's ELBO), each in its colour, and the series ``highlight`` (an
    index) drawn thick with the others thin."""
    # one series when its first entry is a number; restarts' histories differ in length, so a
    # list of series is ragged and np.ndim(y) would raise on it
    one = len(y) == 0 or np.ndim(y[0]) == 0
    series = [np.asarray(y, dtype=np.float64)] if one else [np.asarray(s, np.float64) for s in y]
    x0, y0, w, h = 70, 20, width - 90, height - 70
    n = max((s.size for s in series), default=0)
    if n == 0:
        return _svg(width, height, title, [_text(width / 2, height / 2, "no history recorded", 12, "middle")])
    lo, hi = _range(np.concatenate(series))
    body = _axes(x0, y0, w, h, lo, hi, x_label, y_label)
    for i, values in enumerate(series):
        xs = x0 + (np.arange(values.size) / max(1, n - 1)) * w
        ys = y0 + h - (values - lo) / (hi - lo) * h
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys))
        stroke = 1 if highlight is not None and i != highlight else 2
        body.append(f'<polyline points="{points}" fill="none" stroke="{color(i)}" stroke-width="{stroke}"/>')
        body += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color(i)}"/>' for a, b in zip(xs, ys)]
    body.append(_text(x0, y0 + h + 14, "1", 10, "middle"))
    body.append(_text(x0 + w, y0 + h + 14, str(n), 10, "middle"))
    return _svg(width, height, title, body)


def heatmap(matrix, row_labels, col_labels, title: str, cell=34) -> str:
    """A matrix of values in [0, 1] (e.g. the mean of B): darker is larger, the value printed."""
    m = np.asarray(matrix, dtype=np.float64)
    left, top = 170, 110
    width, height = left + cell * m.shape[1] + 20, top + cell * m.shape[0] + 20
    body = []
    for j, label in enumerate(col_labels):
        x = left + (j + 0.5) * cell
        body.append(
            _text(x, top - 6, _short(label, 16), 10, "start", f'transform="rotate(-50 {x:.1f} {top - 6})"')
        )
    for i, label in enumerate(row_labels):
        body.append(_text(left - 6, top + (i + 0.6) * cell, _short(label, 26), 10, "end"))
        for j in range(m.shape[1]):
            v = float(np.clip(m[i, j], 0.0, 1.0))
            shade = int(round(255 * (1 - v)))
            fill = f"rgb({shade},{shade},255)"
            body.append(
                f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                f'fill="{fill}" stroke="#fff"><title>{_e(row_labels[i])} / {_e(col_labels[j])}: '
                f"{m[i, j]:.3f}</title></rect>"
            )
            body.append(
                _text(
                    left + (j + 0.5) * cell,
                    top + (i + 0.62) * cell,
                    f"{m[i, j]:.2f}",
                    9,
                    "middle",
                    f'fill="{"#fff" if v > 0.55 else "#222"}"',
                )
            )
    return _svg(width, height, title, body)


def transition_diagram(transitions, initial, names, title: str, size=520, min_probability=0.05) -> str:
    """States on a circle, an arrow for every transition of probability >= ``min_probability``
    (width by probability, labelled), the probability of staying and of starting in each node."""
    A = np.asarray(transitions, dtype=np.float64)
    K = A.shape[0]
    node = 34
    # neighbouring states at least two nodes and 60 px apart: the circle grows with K
    radius = max(size / 2 - 110, (2 * node + 60) / (2 * math.sin(math.pi / K)) if K > 2 else 0.0)
    size = 2 * (radius + 110)
    c = size / 2
    angle = [2 * math.pi * k / K - math.pi / 2 for k in range(K)]
    pos = [(c + radius * math.cos(a), c + radius * math.sin(a)) if K > 1 else (c, c) for a in angle]
    body = [
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>'
    ]
    # the boxes of the labels placed so far (the nodes' first): an arrow's label is moved along
    # its normal until it overlaps none, or left out (its value is in the arrow's tooltip)
    placed = []
    # a state's name is cut to the distance between neighbouring states, so that names do not
    # run into each other (the full name is the node's tooltip and in the tables)
    chord = 2 * radius * math.sin(math.pi / K) if K > 2 else 2 * radius
    chars = max(8, min(34, int((chord - 8) / _text_width("x", 10, pad=0))))
    for k, (x, y) in enumerate(pos):
        below = y + node + 14 if y >= c else y - node - 20
        width = _text_width(_short(names[k], chars), 10)
        placed += [_box(x, y, 2 * node, 2 * node), _box(x, below + 2, width, 28)]
    for i in range(K):
        for j in range(K):
            if i == j or A[i, j] < min_probability:
                continue
            (x1, y1), (x2, y2) = pos[i], pos[j]
            dx, dy = x2 - x1, y2 - y1
            d = math.hypot(dx, dy)
            # bend each arrow to its right so that i->j and j->i do not overlap
            nx, ny = -dy / d, dx / d
            mx, my = (x1 + x2) / 2 + 0.12 * d * nx, (y1 + y2) / 2 + 0.12 * d * ny
            sx, sy = x1 + node * dx / d + 6 * nx, y1 + node * dy / d + 6 * ny
            ex, ey = x2 - node * dx / d + 6 * nx, y2 - node * dy / d + 6 * ny
            body.append(
                f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" '
                f'stroke="#555" stroke-opacity="0.75" stroke-width="{1 + 6 * A[i, j]:.1f}" '
                f'marker-end="url(#arrow)"><title>{_e(names[i])} \u2192 {_e(names[j])}: '
                f"{A[i, j]:.3f}</title></path>"
            )
            label = _free_spot(mx, my, nx, ny, _text_width(f"{A[i, j]:.2f}", 10), placed)
            if label is not None:
                body.append(_text(label[0], label[1] + 3.5, f"{A[i, j]:.2f}", 10, "middle", 'fill="#333"'))
    for k, (x, y) in enumerate(pos):
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{node}" fill="{color(k)}" fill-opacity="0.85">'
            f"<title>{_e(names[k])}</title></circle>"
        )
        body.append(_text(x, y - 2, f"S{k}", 13, "middle", 'fill="#fff" font-weight="bold"'))
        body.append(_text(x, y + 13, f"stay {A[k, k]:.2f}", 9, "middle", 'fill="#fff"'))
        below = y + node + 14 if y >= c else y - node - 20
        body.append(_text(x, below, _short(names[k], chars), 10, "middle"))
        body.append(_text(x, below + 12, f"start {float(initial[k]):.2f}", 9, "middle", 'fill="#555"'))
    return _svg(size, size, title, body)


def _text_width(text: str, size: float, pad: float = 4) -> float:
    """A generous estimate of a label's width in pixels (sans-serif: about 0.62 em a character)."""
    return 0.62 * size * len(text) + pad


def _box(x, y, width, height) -> tuple:
    """(left, top, right, bottom) of a box centred at (x, y)."""
    return (x - width / 2, y - height / 2, x + width / 2, y + height / 2)


def _free_spot(x, y, nx, ny, width, placed, height=14.0, tries=(0, 12, -12, 24, -24, 36)):
    """The first point along the normal (nx, ny) from (x, y) where a label of this size overlaps
    no box of ``placed`` (then added to it), or None."""
    for step in tries:
        box = _box(x + step * nx, y + step * ny, width, height)
        if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
            placed.append(box)
            return x + step * nx, y + step * ny
    return None


def bar_chart(labels, values, title: str, value_label: str, width=460) -> str:
    """Horizontal bars, one per label (e.g. next-event hit@1 of the model and the baseline)."""
    values = np.asarray(values, dtype=np.float64)
    left, bar = 170, 26
    height = 40 + bar * len(values) + 30
    top = max(float(values.max(initial=0.0)), 1e-12)
    w = width - left - 60
    body = []
    for i, (label, v) in enumerate(zip(labels, values)):
        y = 20 + i * bar
        body.append(_text(left - 6, y + bar * 0.6, _short(label, 26), 11, "end"))
        body.append(
            f'<rect x="{left}" y="{y + 3}" width="{w * max(v, 0.0) / top:.1f}" height="{bar - 6}" '
            f'fill="{color(i)}"><title>{_e(label)}: {v:.4f}</title></rect>'
        )
        body.append(_text(left + w * max(v, 0.0) / top + 4, y + bar * 0.6, f"{v:.3f}", 10))
    body.append(_text(left + w / 2, height - 8, value_label, 11, "middle"))
    return _svg(width, height, title, body)


def scatter(x, y, groups, title: str, x_label: str, y_label: str, width=560, height=320) -> str:
    """Points coloured by group (e.g. users: length against bound per token, by cluster)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x0, y0, w, h = 70, 20, width - 90, height - 70
    (xlo, xhi), (ylo, yhi) = _range(x), _range(y)
    body = _axes(x0, y0, w, h, ylo, yhi, x_label, y_label)
    body.append(_text(x0, y0 + h + 14, f"{xlo:.4g}", 10, "middle"))
    body.append(_text(x0 + w, y0 + h + 14, f"{xhi:.4g}", 10, "middle"))
    for a, b, g in zip(x, y, groups):
        px, py = x0 + (a - xlo) / (xhi - xlo) * w, y0 + h - (b - ylo) / (yhi - ylo) * h
        body.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color(g)}" fill-opacity="0.75"/>')
    for g in sorted(set(int(g) for g in groups)):
        body.append(f'<circle cx="{x0 + w - 80}" cy="{y0 + 12 + 14 * g}" r="4" fill="{color(g)}"/>')
        body.append(_text(x0 + w - 72, y0 + 16 + 14 * g, f"group {g}", 10))
    return _svg(width, height, title, body)


def state_strip(events, states, title: str, box=22) -> str:
    """A user's events in order, each a box coloured by its decoded state (the event's name on
    hover and, shortened, under the box)."""
    width = 20 + box * len(events)
    body = []
    for t, (event, state) in enumerate(zip(events, states)):
        x = 10 + t * box
        body.append(
            f'<rect x="{x}" y="8" width="{box - 2}" height="{box}" fill="{color(state)}">'
            f"<title>{t + 1}: {_e(event)} (state S{int(state)})</title></rect>"
        )
        body.append(_text(x + box / 2 - 1, 8 + box * 0.68, str(int(state)), 10, "middle", 'fill="#fff"'))
        body.append(
            _text(
                x + box / 2,
                8 + box + 8,
                _short(event, 10),
                9,
                "start",
                f'transform="rotate(60 {x + box / 2} {16 + box})"',
            )
        )
    return _svg(max(width, 60), 8 + box + 70, title, body)
