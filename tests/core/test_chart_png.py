"""Charts saved as palette PNGs (core/chart_png.py), by real steps in the real sandbox: the phone-legible
chart defaults made a typical bar chart 37 KB, over the ~19 KB PNG Teams takes inline, so every chart
went on a card loading from a signed link that expires. What a step asks for itself still wins."""

from __future__ import annotations

import io

from PIL import Image

from core.chart_png import smaller_png
from core.sandbox import StepRequest
from core.sandbox_factory import build_sandbox_and_warehouse

TEAMS_INLINE_PNG = 19_000  # bot/teams_files.py: a PNG whose base64 message fits the Bot Connector's ~28 KB

# What the model writes for the canonical question (core/agent.py: dpi=150, bbox_inches="tight"), and
# the same chart saved with no arguments.
TYPICAL = """
import matplotlib.pyplot as plt, pandas as pd
delays = {"F9": 20.2, "EV": 20.0, "YV": 19.0, "FL": 18.7, "WN": 17.7, "9E": 16.7, "B6": 13.0, "VX": 12.9,
          "OO": 12.6, "UA": 12.1, "MQ": 10.6, "DL": 9.3, "AA": 8.6, "AS": 5.8, "HA": 4.9, "US": 3.8}
df = pd.DataFrame({"carrier": list(delays), "avg_delay": list(delays.values())})
df.plot.bar(x="carrier", y="avg_delay", legend=False)
plt.title("Average departure delay by carrier, 2013"); plt.ylabel("minutes")
plt.savefig("told.png", dpi=150, bbox_inches="tight")
plt.savefig("bare.png")
"""
STEPS = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1, 2], [2, 0, 1]); ax.set_title("see-through")
fig.savefig("clear.png", transparent=True)
fig.savefig("own.png", pil_kwargs={"compress_level": 1})
import io
buffer = io.BytesIO(); fig.savefig(buffer, format="png"); open("buffer.png", "wb").write(buffer.getvalue())
"""


async def saved(settings, session: str, code: str) -> dict[str, bytes]:
    sandbox, _ = await build_sandbox_and_warehouse(settings)
    try:
        result = await sandbox.run(StepRequest(kind="python", session_id=session, code=code, timeout_s=60))
        assert result.ok, result.error
        return {p.name: p.read_bytes() for p in sandbox.workspace(session).glob("*.png")}
    finally:
        await sandbox.close()


def opened(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    image.load()
    return image


async def test_a_typical_chart_is_small_enough_to_go_inline_in_teams(settings):
    files = await saved(settings, "png-typical", TYPICAL)
    for name in ("told.png", "bare.png"):
        image = opened(files[name])
        assert image.mode == "P", name  # a palette: what made it small
        assert len(files[name]) <= TEAMS_INLINE_PNG, (name, len(files[name]))
        assert image.info.get("dpi", (0, 0))[0] >= 149, name  # its resolution kept (150 dpi)
    print(f"\ntold.png {len(files['told.png'])} B, bare.png {len(files['bare.png'])} B")


async def test_transparency_own_options_and_buffers(settings):
    files = await saved(settings, "png-own", STEPS)
    clear = opened(files["clear.png"]).convert("RGBA")
    assert clear.getextrema()[3][0] == 0  # still see-through where nothing was drawn
    own = opened(files["own.png"])
    assert own.mode == "RGBA"  # the step's own PNG options: matplotlib's PNG as it made it
    assert opened(files["buffer.png"]).mode == "P"  # saved to a file object: small too


def test_an_image_a_palette_would_not_shrink_is_kept_as_it_is():
    tiny = io.BytesIO()
    Image.new("P", (4, 4)).save(tiny, format="PNG")
    assert smaller_png(tiny.getvalue()) == tiny.getvalue()
    text = io.BytesIO()
    Image.new("RGB", (1, 1), "white").save(text, format="PNG", optimize=True)
    assert smaller_png(text.getvalue()) == text.getvalue()  # 1 pixel: a palette only adds bytes
