"""Charts saved as small PNGs: matplotlib's PNG re-saved with a 256-colour palette, in the sandbox.

Teams sends a chart inline only when its whole message fits what the Bot Connector takes (a PNG of
about 19 KB, bot/teams_files.py); a larger one goes on a card that loads it from a signed link, and
that link expires (DATATHREAD_LINK_TTL_SECONDS), so the chart goes blank in the conversation's history.
The phone-legible defaults (core/chart_fonts.py) made a typical bar chart 37 KB. A chart has a few
hundred colours (its own and their anti-aliased edges), which a palette holds with no difference
anyone sees: the 16-bar chart the model is told to draw 37 → 13 KB (tests/core/test_chart_png.py);
others 32 → 11 KB (a heat map), 108 → 26 KB (five lines); 14–17 ms each, against ~300 ms for the
`savefig` itself. Slack uploads smaller files too.

Installed in the fork server (core/zygote.py) before any step, so steps locally and on Modal save
charts alike. A step that passes its own PNG options (`pil_kwargs`) gets exactly what it asked for;
a palette that would not be smaller is not kept. Only the bytes a step's own matplotlib made are
read here, in the sandbox; the bot never parses a PNG.
"""

from __future__ import annotations

import io

COLOURS = 256  # the most a PNG palette holds


def smaller_png(data: bytes) -> bytes:
    """`data` (a PNG) with a palette of `COLOURS`, its resolution and text chunks kept; `data` itself
    when that is not smaller. Transparency survives (a fully opaque image drops its alpha first)."""
    from PIL import Image, PngImagePlugin

    image = Image.open(io.BytesIO(data))
    if image.mode == "RGBA" and image.getextrema()[3][0] == 255:
        image = image.convert("RGB")  # opaque: no alpha in the palette, a smaller file
    if image.mode not in ("RGB", "RGBA"):
        return data
    # FASTOCTREE: the one method Pillow has for RGBA, and 5x as fast as median cut on charts; no
    # dithering, which would speckle flat colours and cost bytes.
    paletted = image.quantize(COLOURS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    info = PngImagePlugin.PngInfo()
    for key, value in getattr(image, "text", {}).items():
        info.add_text(key, value)
    out = io.BytesIO()
    extra = {"dpi": image.info["dpi"]} if "dpi" in image.info else {}
    paletted.save(out, format="PNG", pnginfo=info, **extra)
    return out.getvalue() if out.tell() < len(data) else data


def use_small_pngs() -> None:
    """Make this process's Agg canvas write palette PNGs (once; steps inherit it)."""
    from matplotlib import cbook
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    original = FigureCanvasAgg.print_png
    if getattr(original, "small_pngs", False):
        return

    # Not matplotlib's own method, so `print_figure` hands it every option it has (dpi, orientation…),
    # which matplotlib's print_png takes no part of: dropped, as matplotlib drops them for its own.
    def print_png(self, filename_or_obj, *, metadata=None, pil_kwargs=None, **_figure_options):
        if pil_kwargs is not None:  # the step chose its own PNG options: those, as they are
            return original(self, filename_or_obj, metadata=metadata, pil_kwargs=pil_kwargs)
        made = io.BytesIO()
        original(self, made, metadata=metadata)
        with cbook.open_file_cm(filename_or_obj, "wb") as fh:
            fh.write(smaller_png(made.getvalue()))

    print_png.small_pngs = True  # type: ignore[attr-defined]
    FigureCanvasAgg.print_png = print_png
