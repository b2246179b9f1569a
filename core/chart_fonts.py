"""The look of the charts steps draw: legible on a phone, in colours told apart by the colour-blind,
with Chinese, Japanese and Korean text as glyphs, not empty boxes. The fork server sets both once,
before any step forks; a step's own settings (`figsize=`, `dpi=`, `plt.rcParams`, a style) still win.

Slack and Teams show a chart at most about 360 px wide on a phone. matplotlib's defaults (10 pt text
on a 6.4-inch figure) drew its text at 8.7 px there, and its colour cycle has green and red third and
fourth, which red-green colour-blind readers cannot tell apart (`PHONE_DEFAULTS`, `PALETTE`).

matplotlib draws with DejaVu Sans, which has no CJK glyphs, and falls back to another font only for
the families `font.family` lists: installing a CJK font (Debian: fonts-noto-cjk) alone changed nothing.
The fork server lists the first CJK sans-serif font this host has after the default, once, before any
step forks; without one nothing changes (naming a family that is not installed warns on every chart).
Only a font a step can read counts (`readable`): matplotlib also lists fonts in the bot user's home
(~/.local/share/fonts, ~/Library/Fonts), which steps never see, and a listed font a step cannot open
fails its chart.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# A bar chart saved as the model is told to (`savefig(..., dpi=150, bbox_inches="tight")`), 16 bars,
# a 40-character title: text 12.0 px at 360 px wide (8.7 before; 12 pt gives 10.8), 811 x 626 px
# (863 x 696), 37 KB (34 KB) as matplotlib writes it, 13 KB as a palette PNG (core/chart_png.py).
# At 14 pt the title (1.2 times) was wider than the plot it names.
PHONE_DEFAULTS = {
    "font.size": 13,  # ticks, axis labels and legend; the title 1.2 times that
    "figure.figsize": (6.0, 4.0),  # a phone's screen shape, not a desktop's 6.4 x 4.8
    "figure.dpi": 150,  # 900 px wide when saved without a dpi: sharp on a phone (640 before)
    "savefig.bbox": "tight",  # larger labels are never cut at the figure's edge (`carrier` was)
}
PALETTE = "tableau-colorblind10"  # matplotlib's colour-blind-safe cycle (Tableau's Color Blind 10)

# Each covers every CJK script (a Noto/Source Han face differs by region only in glyph shapes).
CJK_SANS = (
    "Noto Sans CJK JP",  # Debian/Ubuntu fonts-noto-cjk, Fedora google-noto-sans-cjk-fonts
    "Noto Sans CJK SC",
    "Noto Sans CJK TC",
    "Noto Sans CJK KR",
    "Source Han Sans",  # Adobe's name for the same design
    "WenQuanYi Zen Hei",  # fonts-wqy-zenhei
    "Droid Sans Fallback",  # fonts-droid-fallback
)


def font_families(installed: Iterable[str]) -> list[str] | None:
    """matplotlib's `font.family` for a host with the fonts named `installed`: the default sans-serif
    first (Latin text looks as before), then a CJK font for what it lacks; None when there is none."""
    have = set(installed)
    cjk = next((name for name in CJK_SANS if name in have), None)
    return ["sans-serif", cjk] if cjk else None


def readable(path: str, roots: Iterable[str]) -> bool:
    """Whether the font file at `path` lies under one of `roots`, the folders a step may read."""
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots)


def use_cjk_fallback() -> None:
    """Set matplotlib's font fallback in this process (the fork server's: steps inherit it)."""
    import matplotlib
    from matplotlib import font_manager

    from core.isolation import step_readable

    roots = step_readable([])
    fonts = font_manager.fontManager.ttflist
    families = font_families(font.name for font in fonts if readable(font.fname, roots))
    if families:
        matplotlib.rcParams["font.family"] = families


def use_phone_defaults() -> None:
    """Set the chart defaults above in this process (the fork server's: steps inherit them, and
    whatever a step sets afterwards replaces them)."""
    import matplotlib
    import matplotlib.style

    matplotlib.rcParams.update({**matplotlib.style.library[PALETTE], **PHONE_DEFAULTS})
