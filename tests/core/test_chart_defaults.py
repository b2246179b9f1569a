"""Charts legible on a phone (core/chart_fonts.py `use_phone_defaults`), drawn by a real step in the
real sandbox: Slack and Teams show a chart at most about 360 px wide there, where matplotlib's defaults
drew its text 8.7 px high, 640 px wide when saved without a dpi (blurred on a phone's screen), in a
colour cycle whose third and fourth colours (green, red) red-green colour-blind readers cannot tell
apart. A step's own settings still win, and the CJK font fallback stays."""

from __future__ import annotations

import json
import struct

import matplotlib.colors
import matplotlib.style
from matplotlib import font_manager

from core.chart_fonts import font_families, readable
from core.isolation import step_readable
from core.sandbox import StepRequest
from core.sandbox_factory import build_sandbox_and_warehouse

PHONE_PX = 360
DELAYS = {"F9": 20.2, "EV": 20.0, "YV": 19.0, "FL": 18.7, "WN": 17.7, "9E": 16.7, "B6": 13.0, "VX": 12.9}
DELAYS |= {"OO": 12.6, "UA": 12.1, "MQ": 10.6, "DL": 9.3, "AA": 8.6, "AS": 5.8, "HA": 4.9, "US": 3.8}
# What the model writes (core/agent.py tells it to save with dpi=150 and bbox_inches="tight"), then the
# same chart saved with no arguments at all, and what was drawn: the tick labels' size, the first bar's
# colour, where the text lies against the figure.
TYPICAL = f"""
import json
import matplotlib, matplotlib.pyplot as plt, pandas as pd
df = pd.DataFrame({{"carrier": {list(DELAYS)!r}, "avg_delay": {list(DELAYS.values())!r}}})
ax = df.plot.bar(x="carrier", y="avg_delay", legend=False)
plt.title("Average departure delay by carrier, 2013")
plt.ylabel("minutes")
plt.savefig("told.png", dpi=150, bbox_inches="tight")
plt.savefig("bare.png")
fig = plt.gcf()
drawn = fig.get_tightbbox(fig.canvas.get_renderer())
print(json.dumps({{
    "tick_pt": ax.get_xticklabels()[0].get_fontsize(),
    "bar": matplotlib.colors.to_hex(ax.patches[0].get_facecolor()),
    "family": list(plt.rcParams["font.family"]),
    "drawn": list(drawn.bounds), "figure": list(fig.get_size_inches()), "dpi": fig.dpi,
    "pad": plt.rcParams["savefig.pad_inches"],
}}))
"""
# A step that sets its own style, sizes and colours.
OWN = """
import json
import matplotlib, matplotlib.pyplot as plt
plt.style.use("ggplot")
plt.rcParams.update({"font.size": 8, "savefig.bbox": "standard"})
fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
ax.bar(["a", "b"], [1, 2])
fig.savefig("mine.png")
fig2, ax2 = plt.subplots()
ax2.bar(["a"], [1], color="red")
title = ax2.set_title("t", fontsize=30)
print(json.dumps({
    "tick_pt": ax.get_xticklabels()[0].get_fontsize(),
    "bar": matplotlib.colors.to_hex(ax.patches[0].get_facecolor()),
    "red": matplotlib.colors.to_hex(ax2.patches[0].get_facecolor()), "title_pt": title.get_fontsize(),
}))
"""


async def step(settings, session: str, code: str) -> tuple[dict, dict[str, bytes]]:
    sandbox, _ = await build_sandbox_and_warehouse(settings)
    try:
        result = await sandbox.run(StepRequest(kind="python", session_id=session, code=code, timeout_s=60))
        assert result.ok, result.error
        folder = sandbox.workspace(session)
        return json.loads(result.output), {p.name: p.read_bytes() for p in folder.glob("*.png")}
    finally:
        await sandbox.close()


def pixels(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])  # IHDR: width, height


async def test_a_typical_bar_chart_reads_well_on_a_phone(settings):
    drawn, files = await step(settings, "chart-phone", TYPICAL)
    width, height = pixels(files["told.png"])
    text_px = drawn["tick_pt"] * 150 / 72 * PHONE_PX / width  # its tick labels, shown 360 px wide
    assert text_px >= 11.5, (text_px, width)  # 8.7 px with matplotlib's defaults
    assert len(files["told.png"]) < 100_000 and width <= 1200
    # saved with no dpi: still sharp at twice a phone's width (it was 640 px), not huge
    bare_width, _ = pixels(files["bare.png"])
    assert 2 * PHONE_PX <= bare_width <= 1200 and len(files["bare.png"]) < 100_000
    # and no label cut at the figure's edge: all that is drawn lies inside the figure, or the image was
    # cropped to it (a larger font put the x-axis label below a 6 x 4 inch figure)
    x0, y0, w, h = drawn["drawn"]
    inside = x0 >= 0 and y0 >= 0 and x0 + w <= drawn["figure"][0] and y0 + h <= drawn["figure"][1]
    cropped = abs(bare_width - (w + 2 * drawn["pad"]) * drawn["dpi"]) <= 2
    assert inside or cropped, drawn
    colour_blind_safe = matplotlib.style.library["tableau-colorblind10"]["axes.prop_cycle"]
    assert drawn["bar"] == colour_blind_safe.by_key()["color"][0].lower()
    # the CJK fallback the fork server chose is still the font family (the default where none)
    fonts = font_manager.fontManager.ttflist
    roots = step_readable([])
    cjk = font_families(font.name for font in fonts if readable(font.fname, roots))
    assert drawn["family"] == (cjk or ["sans-serif"])
    print(f"\ntold.png {width}x{height} px, {len(files['told.png'])} B, text {text_px:.1f} px at 360")
    print(f"bare.png {pixels(files['bare.png'])} px, {len(files['bare.png'])} B")


async def test_a_steps_own_style_sizes_and_colours_win(settings):
    drawn, files = await step(settings, "chart-own", OWN)
    assert pixels(files["mine.png"]) == (200, 150)  # figsize 4 x 3 at dpi 50, not cropped
    assert drawn["tick_pt"] == 8
    ggplot = matplotlib.style.library["ggplot"]["axes.prop_cycle"].by_key()["color"][0]
    assert drawn["bar"] == matplotlib.colors.to_hex(ggplot)
    assert drawn["red"] == "#ff0000" and drawn["title_pt"] == 30
