"""Charts with Chinese, Japanese or Korean text drew empty boxes even on hosts with a CJK font:
matplotlib falls back only to families `font.family` names. Table-driven over the pure choice, and the
fork server's own process over a real CJK font where this host has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.chart_fonts import font_families

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


DRAW = """
import warnings
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import font_manager
import core.chart_fonts
core.chart_fonts.use_cjk_fallback()
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
