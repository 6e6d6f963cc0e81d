"""The console's diagram of a process: its states in a row, its steps as arcs, as SVG built from escaped text."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

ABORTED_STATE = "aborted"

# The diagram's text is monospace, so a label's width is known without a browser: characters times the
# font's advance (0.6 em for the usual monospace faces), plus a margin.
_STATE_FONT, _STEP_FONT, _ADVANCE = 12, 10, 0.62
_NODE_H = 30.0
_LANE_H = 18.0


def _text_width(text: str, size: int) -> float:
    return len(text) * size * _ADVANCE


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """Where the states stand and where the step arcs run (a row of nodes, lanes above and below it)."""

    states: list[str]
    terminal: set[str]
    steps: list[tuple[str, Any, str]]
    x_of: dict[str, float]
    width_of: dict[str, float]
    arcs: list[tuple[str, float, float, bool, int]]
    row_y: float
    bus_y: float
    width: float
    height: float

    def center(self, state: str) -> float:
        return self.x_of[state] + self.width_of[state] / 2


def state_svg(process: Any) -> str:
    """A left-to-right diagram of a process's states in definition order: each node as wide as its name,
    steps as labelled arcs (forward above the row, backward below), the first step from a start dot, and
    ABORT_PLAN as dashed edges from every live state to `aborted` (the built-in step any live order takes)."""
    layout = _layout(process)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="process" width="{layout.width:.0f}" '
        f'height="{layout.height:.0f}" viewBox="0 0 {layout.width:.0f} {layout.height:.0f}" font-family="monospace">',
        '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#447"/></marker></defs>',
    ]
    parts += _nodes(layout)
    parts += _starts(layout)
    parts += _arcs(layout)
    parts += _abort_bus(layout)
    parts.append("</svg>")
    return "".join(parts)


def _layout(process: Any) -> _Layout:
    states = list(process.definition.states)
    if ABORTED_STATE not in states:
        states.append(ABORTED_STATE)
    terminal = {*process.definition.terminal, ABORTED_STATE}
    steps = [(name, compiled.step.from_, compiled.step.to) for name, compiled in process.steps.items()]
    forward = [(n, o, t) for n, froms, t in steps for o in froms if o in states and t in states]
    gap = max(
        [40.0] + [_text_width(n, _STEP_FONT) + 16 for n, o, t in forward if states.index(t) == states.index(o) + 1]
    )
    x_of: dict[str, float] = {}
    width_of: dict[str, float] = {}
    x = 60.0
    for state in states:
        x_of[state], width_of[state] = x, max(80.0, _text_width(state, _STATE_FONT) + 24)
        x += width_of[state] + gap
    lanes_above, lanes_below = 0, 0
    arcs: list[tuple[str, float, float, bool, int]] = []
    for name, origin, to in forward:
        x1 = x_of[origin] + width_of[origin] / 2
        x2 = x_of[to] + width_of[to] / 2
        ahead = x2 > x1
        if ahead:
            lanes_above += 1
        else:
            lanes_below += 1
        arcs.append((name, x1, x2, ahead, lanes_above if ahead else lanes_below))
    row_y = 20 + _LANE_H * (lanes_above + 1)
    bus_y = row_y + _NODE_H + _LANE_H * (lanes_below + 1) + 14
    return _Layout(states, terminal, steps, x_of, width_of, arcs, row_y, bus_y, x + 20, bus_y + 30)


def _nodes(layout: _Layout) -> list[str]:
    parts = []
    row_y, terminal = layout.row_y, layout.terminal
    for state in layout.states:
        sx, w = layout.x_of[state], layout.width_of[state]
        fill = "#fee" if state == ABORTED_STATE else "#efe" if state in terminal else "#eef"
        parts.append(
            f'<g class="state" data-state="{html.escape(state)}"><rect x="{sx:.1f}" y="{row_y:.1f}" width="{w:.1f}" '
            f'height="{_NODE_H:.0f}" rx="6" fill="{fill}" stroke="#447"/>'
            f'<text x="{sx + w / 2:.1f}" y="{row_y + 20:.1f}" font-size="{_STATE_FONT}" text-anchor="middle">'
            f"{html.escape(state)}</text></g>"
        )
    return parts


def _starts(layout: _Layout) -> list[str]:
    parts = []
    row_y, states = layout.row_y, layout.states
    starts = [(n, t) for n, froms, t in layout.steps for o in froms if o is None and t in states]
    for name, to in starts:
        tx = layout.x_of[to]
        parts.append(f'<circle cx="14" cy="{row_y + _NODE_H / 2:.1f}" r="6" fill="#447"/>')
        parts.append(
            f'<path d="M20,{row_y + _NODE_H / 2:.1f} L{tx:.1f},{row_y + _NODE_H / 2:.1f}" stroke="#447" '
            'fill="none" marker-end="url(#a)"/>'
        )
        parts.append(
            f'<text class="step" x="22" y="{row_y - 4:.1f}" font-size="{_STEP_FONT}">{html.escape(name)}</text>'
        )
    return parts


def _arcs(layout: _Layout) -> list[str]:
    parts = []
    row_y = layout.row_y
    for name, x1, x2, ahead, lane in layout.arcs:
        if ahead:
            y = row_y - lane * _LANE_H
            y_end = row_y
        else:
            y = row_y + _NODE_H + lane * _LANE_H
            y_end = row_y + _NODE_H
        parts.append(
            f'<path d="M{x1:.1f},{y_end:.1f} L{x1:.1f},{y:.1f} L{x2:.1f},{y:.1f} L{x2:.1f},{y_end:.1f}" '
            'stroke="#447" fill="none" marker-end="url(#a)"/>'
        )
        label_x = min(x1, x2) + 4
        parts.append(
            f'<text class="step" x="{label_x:.1f}" y="{y - 3:.1f}" font-size="{_STEP_FONT}">{html.escape(name)}</text>'
        )
    return parts


def _abort_bus(layout: _Layout) -> list[str]:
    live = [s for s in layout.states if s not in layout.terminal]
    if not live:
        return []
    parts = []
    row_y, bus_y = layout.row_y, layout.bus_y
    ax = layout.center(ABORTED_STATE)
    first = min(layout.center(s) for s in live)
    for state in live:
        cx = layout.center(state)
        parts.append(
            f'<path class="abort" d="M{cx:.1f},{row_y + _NODE_H:.1f} L{cx:.1f},{bus_y:.1f}" stroke="#a44" '
            'stroke-dasharray="4 3" fill="none"/>'
        )
    parts.append(
        f'<path class="abort" d="M{first:.1f},{bus_y:.1f} L{ax:.1f},{bus_y:.1f} L{ax:.1f},{row_y + _NODE_H:.1f}" '
        'stroke="#a44" stroke-dasharray="4 3" fill="none" marker-end="url(#a)"/>'
    )
    parts.append(
        f'<text class="step abort" x="{first + 4:.1f}" y="{bus_y + 14:.1f}" font-size="{_STEP_FONT}" '
        f'fill="#a44">ABORT_PLAN (from any live state)</text>'
    )
    return parts
