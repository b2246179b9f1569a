"""The fonts of the charts steps draw: Chinese, Japanese and Korean text as glyphs, not empty boxes.

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
