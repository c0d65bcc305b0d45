"""Small SVG charts drawn in Python (no JavaScript library, no network): curves over k and bars with error bars.

Built with ElementTree so labels are escaped; the HTML template inlines the result.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d")
WIDTH, HEIGHT = 440, 240
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 14, 34


@dataclass(frozen=True)
class Series:
    """One line: values by k (1..n), drawn solid or dashed."""

    name: str
    values: dict[int, float]
    color: str
    dashed: bool = False


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    ci95: tuple[float, float] | None
    color: str


def _svg(title: str, width: int = WIDTH, height: int = HEIGHT) -> ET.Element:
    svg = ET.Element(
        "svg",
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {width} {height}",
        width=str(width),
        height=str(height),
        role="img",
    )
    svg.set("class", "chart")
    ET.SubElement(svg, "title").text = title
    return svg


def _y(value: float, height: int = HEIGHT) -> float:
    return TOP + (1.0 - value) * (height - TOP - BOTTOM)


def _axes(svg: ET.Element, width: int, height: int) -> None:
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = f"{_y(tick, height):.1f}"
        ET.SubElement(svg, "line", x1=str(LEFT), x2=str(width - RIGHT), y1=y, y2=y, stroke="#e5e7eb")
        label = ET.SubElement(svg, "text", x=str(LEFT - 6), y=y, dy="4")
        label.set("text-anchor", "end")
        label.set("class", "tick")
        label.text = f"{tick:.2f}"


def _text(svg: ET.Element, x: float, y: float, text: str, anchor: str = "middle", cls: str = "tick") -> None:
    element = ET.SubElement(svg, "text", x=f"{x:.1f}", y=f"{y:.1f}")
    element.set("text-anchor", anchor)
    element.set("class", cls)
    element.text = text


def curves_chart(series: Sequence[Series], title: str = "pass@k and pass^k over k") -> str:
    """Lines of pass@k (solid) and pass^k (dashed) against k, with a legend under the plot."""
    max_k = max((max(s.values) for s in series if s.values), default=1)
    legend_rows = len(series)
    height = HEIGHT + 16 * legend_rows
    plot_bottom = HEIGHT
    svg = _svg(title, WIDTH, height)
    svg.set("id", "curves-chart")
    _axes(svg, WIDTH, plot_bottom)
    span = WIDTH - LEFT - RIGHT

    def x_of(k: int) -> float:
        return LEFT + (span / 2 if max_k == 1 else (k - 1) / (max_k - 1) * span)

    for k in range(1, max_k + 1):
        _text(svg, x_of(k), plot_bottom - BOTTOM + 16, str(k))
    _text(svg, LEFT + span / 2, plot_bottom - 4, "k (attempts)")
    for s in series:
        points = [(x_of(k), _y(v, plot_bottom)) for k, v in sorted(s.values.items())]
        if not points:
            continue
        line = ET.SubElement(
            svg,
            "polyline",
            points=" ".join(f"{x:.1f},{y:.1f}" for x, y in points),
            fill="none",
            stroke=s.color,
        )
        line.set("stroke-width", "2")
        if s.dashed:
            line.set("stroke-dasharray", "5 4")
        line.set("class", "curve")
        for (x, y), (k, v) in zip(points, sorted(s.values.items()), strict=True):
            dot = ET.SubElement(svg, "circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r="3", fill=s.color)
            ET.SubElement(dot, "title").text = f"{s.name}, k={k}: {v:.3f}"
    for i, s in enumerate(series):
        x = LEFT
        y = plot_bottom + 4 + i * 16
        sample = ET.SubElement(svg, "line", x1=f"{x:.1f}", x2=f"{x + 18:.1f}", y1=f"{y:.1f}", y2=f"{y:.1f}")
        sample.set("stroke", s.color)
        sample.set("stroke-width", "2")
        if s.dashed:
            sample.set("stroke-dasharray", "5 4")
        _text(svg, x + 24, y + 4, s.name, anchor="start", cls="legend")
    return ET.tostring(svg, encoding="unicode")


def bars_chart(bars: Sequence[Bar], title: str) -> str:
    """Vertical bars in [0, 1] with 95% CI whiskers (a missing value is drawn as an empty slot labelled —)."""
    width = max(WIDTH, LEFT + RIGHT + 86 * len(bars))
    svg = _svg(title, width, HEIGHT)
    _axes(svg, width, HEIGHT)
    slot = (width - LEFT - RIGHT) / max(1, len(bars))
    for i, bar in enumerate(bars):
        centre = LEFT + slot * (i + 0.5)
        half = min(22.0, slot * 0.3)
        label = bar.label if len(bar.label) <= 14 else bar.label[:13] + "…"
        _text(svg, centre, HEIGHT - BOTTOM + 16, label)
        if bar.value is None:
            _text(svg, centre, _y(0.05), "—")
            continue
        top = _y(bar.value)
        rect = ET.SubElement(
            svg,
            "rect",
            x=f"{centre - half:.1f}",
            y=f"{top:.1f}",
            width=f"{2 * half:.1f}",
            height=f"{_y(0.0) - top:.1f}",
            fill=bar.color,
        )
        rect.set("fill-opacity", "0.8")
        ET.SubElement(rect, "title").text = f"{bar.label}: {bar.value:.3f}"
        if bar.ci95 is not None:
            low, high = _y(bar.ci95[0]), _y(bar.ci95[1])
            for x1, x2, y1, y2 in (
                (centre, centre, high, low),
                (centre - 6, centre + 6, high, high),
                (centre - 6, centre + 6, low, low),
            ):
                ET.SubElement(
                    svg, "line", x1=f"{x1:.1f}", x2=f"{x2:.1f}", y1=f"{y1:.1f}", y2=f"{y2:.1f}", stroke="#111827"
                )
        _text(svg, centre, top - 4, f"{bar.value:.2f}")
    return ET.tostring(svg, encoding="unicode")
