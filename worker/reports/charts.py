"""Inline SVG charts for the HTML report, drawn in Python: no script, no external resource.

Every function returns an ``<svg>`` string; every text that reaches it passes ``html.escape``.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 760
COLORS = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#c53030")


def _frame(height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">'
        f"<title>{escape(label)}</title>" + "".join(body) + "</svg>"
    )


def _legend(names: Sequence[str], y: int) -> list[str]:
    parts = []
    for i, name in enumerate(names):
        x = 70 + i * 170
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{COLORS[i]}"/>')
        parts.append(f'<text x="{x + 18}" y="{y}" font-size="12">{escape(name)}</text>')
    return parts


def grouped_bars(
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[int]]],
    value_label: str = "{:,}",
    scale: float = 1.0,
) -> str:
    """Vertical bars, one cluster per category, one bar per series; values ≥ 0 (scaled for labels)."""
    height, top, bottom, left = 300, 30, 60, 70
    plot_h, plot_w = height - top - bottom, WIDTH - left - 20
    peak = max([v for _, values in series for v in values] + [1])
    body = [f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#555"/>'
    )
    body.append(
        f'<text x="{left - 6}" y="{top + 4}" font-size="10" text-anchor="end">'
        f"{escape(value_label.format(peak / scale))}</text>"
    )
    if not categories:
        body.append(f'<text x="{left + 10}" y="{top + plot_h // 2}" font-size="12">no data</text>')
        return _frame(height, body, title)
    slot = plot_w / len(categories)
    bar = max(min(slot * 0.8 / max(len(series), 1), 40), 1)
    for ci, category in enumerate(categories):
        x0 = left + ci * slot + (slot - bar * len(series)) / 2
        for si, (name, values) in enumerate(series):
            value = values[ci]
            h = plot_h * value / peak
            shown = escape(value_label.format(value / scale))
            body.append(
                f'<rect x="{x0 + si * bar:.1f}" y="{top + plot_h - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{COLORS[si % len(COLORS)]}">'
                f"<title>{escape(category)} {escape(name)}: {shown}</title></rect>"
            )
        if len(categories) <= 16 or ci % max(len(categories) // 16, 1) == 0:
            cx = left + ci * slot + slot / 2
            body.append(
                f'<text x="{cx:.1f}" y="{top + plot_h + 14}" font-size="10" '
                f'text-anchor="end" transform="rotate(-35 {cx:.1f} {top + plot_h + 14})">'
                f"{escape(category)}</text>"
            )
    body.extend(_legend([name for name, _ in series], height - 8))
    return _frame(height, body, title)


def horizontal_bars(title: str, rows: Sequence[tuple[str, int]]) -> str:
    height = 40 + 26 * max(len(rows), 1)
    left, plot_w = 170, WIDTH - 170 - 80
    peak = max([v for _, v in rows] + [1])
    body = [f'<text x="10" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    for i, (name, value) in enumerate(rows):
        y = 30 + i * 26
        w = plot_w * value / peak
        body.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end">'
            f"{escape(name)}</text>"
        )
        body.append(
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="18" fill="{COLORS[1]}">'
            f"<title>{escape(name)}: {value:,}</title></rect>"
        )
        body.append(f'<text x="{left + w + 6:.1f}" y="{y + 14}" font-size="12">{value:,}</text>')
    return _frame(height, body, title)


def range_dots(
    title: str, rows: Sequence[tuple[str, Sequence[float]]], names: Sequence[str]
) -> str:
    """One line per row: a dot per value (e.g. p50, p90, p99) on a shared axis through zero."""
    height = 60 + 24 * max(len(rows), 1)
    left, right = 200, WIDTH - 30
    values = [v for _, vs in rows for v in vs] + [0.0]
    low, high = min(values), max(values)
    if high - low < 1e-9:
        low, high = low - 0.01, high + 0.01
    span = high - low

    def x(v: float) -> float:
        return left + (right - left) * (v - low) / span

    body = [f'<text x="10" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    body.append(
        f'<line x1="{x(0):.1f}" y1="26" x2="{x(0):.1f}" y2="{height - 30}" stroke="#999" '
        'stroke-dasharray="3,3"/>'
    )
    for edge in (low, high):
        body.append(
            f'<text x="{x(edge):.1f}" y="{height - 16}" font-size="10" text-anchor="middle">'
            f"{edge:+.1%}</text>"
        )
    for i, (name, vs) in enumerate(rows):
        y = 40 + i * 24
        body.append(
            f'<text x="{left - 10}" y="{y + 4}" font-size="12" text-anchor="end">'
            f"{escape(name)}</text>"
        )
        body.append(
            f'<line x1="{x(min(vs)):.1f}" y1="{y}" x2="{x(max(vs)):.1f}" y2="{y}" stroke="#bbb"/>'
        )
        for j, v in enumerate(vs):
            body.append(
                f'<circle cx="{x(v):.1f}" cy="{y}" r="5" fill="{COLORS[j % len(COLORS)]}">'
                f"<title>{escape(name)} {escape(names[j])}: {v:+.4%}</title></circle>"
            )
    body.extend(_legend(names, height - 2))
    return _frame(height, body, title)
