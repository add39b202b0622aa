"""Small horizontal bar charts in text, for ``pubsub topics stats --chart``.

A person comparing subscriptions wants to see at a glance which one lags; a bar per subscription
scaled to the largest backlog shows that in a terminal, with no plotting library.  Bars use Unicode
block characters (eighths of a cell) when the output can encode them, else ``#``.
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_WIDTH = 40
"""Cells of the longest bar."""

_EIGHTHS = " ▏▎▍▌▋▊▉"  # a partial cell: 0..7 eighths
_FULL = "█"


def can_draw_blocks(encoding: str | None) -> bool:
    """Whether text in ``encoding`` can carry the block characters."""
    try:
        (_FULL + _EIGHTHS).encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _bar(value: float, scale: float, *, width: int, blocks: bool) -> str:
    cells = value / scale * width if scale > 0 else 0.0
    if not blocks:
        return "#" * round(cells)
    eighths = round(cells * 8)
    bar = _FULL * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")
    return bar or ("▏" if value > 0 else "")


def bar_chart(
    values: Mapping[str, int], *, unit: str, width: int = DEFAULT_WIDTH, blocks: bool = True
) -> list[str]:
    """One line per label (in the mapping's order): the label, a bar scaled to the largest value, the value.

    A zero draws no bar, and any non-zero value at least a sliver, so "a little" never looks like
    "nothing".

    Raises:
        ValueError: a negative value or a width under 1 (a chart cannot show them).
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    bad = {label: v for label, v in values.items() if v < 0}
    if bad:
        raise ValueError(f"a bar chart shows values >= 0, got {bad}")
    scale = max(values.values(), default=0)
    label_width = max((len(label) for label in values), default=0)
    lines = []
    for label, value in values.items():
        bar = _bar(value, scale, width=width, blocks=blocks)
        lines.append(f"{label.ljust(label_width)}  {bar.ljust(width)}  {value} {unit}")
    return lines


__all__ = ["DEFAULT_WIDTH", "bar_chart", "can_draw_blocks"]
