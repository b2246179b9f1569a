"""Charts with Chinese, Japanese or Korean text drew empty boxes even on hosts with a CJK font:
matplotlib falls back only to families `font.family` names. Table-driven over the pure choice, and the
fork server's own process over a real CJK font where this host has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.chart_fonts import font_families, readable

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("installed", "families"),
    [
        (["DejaVu Sans", "Noto Sans CJK JP", "Noto Sans CJK KR"], ["sans-serif", "Noto Sans CJK JP"]),
        (["DejaVu Sans", "Noto Sans CJK KR", "WenQuanYi Zen Hei"], ["sans-serif", "Noto Sans CJK KR"]),
        (["DejaVu Sans", "WenQuanYi Zen Hei"], ["sans-serif", "WenQuanYi Zen Hei"]),
        (["DejaVu Sans", "Noto Serif CJK JP", "Noto Sans Mono CJK JP"], None),  # no sans-serif CJK face
        (["DejaVu Sans", "DejaVu Serif"], None),
        ([], None),
    ],
)
def test_a_cjk_font_the_host_has_is_the_fallback(installed, families):
    assert font_families(installed) == families


def test_only_a_font_steps_can_read_is_the_fallback(tmp_path):
    """A font in the bot user's home (~/.local/share/fonts) is listed by matplotlib, but a step never
    sees that home: as the fallback it would fail every chart."""
    system, home = tmp_path / "usr", tmp_path / "home"
    (system / "share/fonts").mkdir(parents=True)
    (home / ".local/share/fonts").mkdir(parents=True)
    (home / "link.otf").symlink_to(home / ".local/share/fonts/a.otf")
    roots = [str(system)]
    assert readable(str(system / "share/fonts/NotoSansCJK.ttc"), roots)
    assert not readable(str(home / ".local/share/fonts/NotoSansCJK.ttc"), roots)
    assert not readable(str(home / "link.otf"), roots)  # where it really is counts
    assert not readable(str(tmp_path / "usr-other/a.otf"), roots)  # a sibling, not under the root


DRAW = """
import warnings
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import font_manager
import core.chart_fonts
core.chart_fonts.use_cjk_fallback()
core.chart_fonts.use_phone_defaults()  # as the fork server does (core/zygote.py): the font kept
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fig, ax = plt.subplots()
    ax.set_title("航空会社 항공사 carriers")
    fig.canvas.draw()
print(sum("missing from font" in str(w.message) for w in caught))
"""


def test_cjk_text_is_drawn_with_the_hosts_cjk_font(tmp_path):
    from matplotlib import font_manager

    if font_families(font.name for font in font_manager.fontManager.ttflist) is None:
        pytest.skip("no CJK font on this host (Debian: apt-get install fonts-noto-cjk)")
    done = subprocess.run(
        [sys.executable, "-c", DRAW],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"MPLCONFIGDIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == "0", done.stdout + done.stderr
