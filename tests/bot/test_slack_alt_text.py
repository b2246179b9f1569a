"""Charts reach Slack with alt text, what a screen reader says for them: the model's description, or
words made from the title when it gave none; a hostile one clipped to what Slack takes and unable to
mention anyone. End to end: signed Slack events into `datathread serve`, the scripted model, a real
sandbox step drawing the charts, and what the fake Slack Web API recorded of the uploads."""

from __future__ import annotations

import pytest
import pytest_asyncio

from tests.bot.slack_harness import mention, module_settings, serve
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import ALT_TXT_LIMIT

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHARTS = """
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
for name in ('delays.png', 'flights.png', 'odd.png'):
    plt.figure(figsize=(2, 1.5)); plt.bar(['F9', 'HA'], [20.2, 4.9]); plt.savefig(name, dpi=40)
open('delays.csv', 'w').write('carrier,avg_delay\\nF9,20.2\\nHA,4.9\\n')
"""
ALT = "Bar chart of average departure delay by carrier: F9 highest at 20.2 minutes, HA lowest at 4.9."
# A description steered by the data: a broadcast, a mention, a link, an escape sequence, a direction
# override, and three times the length Slack takes.
HOSTILE = (
    "<!channel> <@U0002> see <https://evil.example|the real numbers>\x1b[2J\n\u202eevil "
    + "padding " * 375
    + "東京"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    home = tmp_path_factory.mktemp("alt") / "home"
    home.mkdir(parents=True)
    async with serve(module_settings(home, model.url), slack_api) as harness:
        yield harness


async def test_charts_are_uploaded_with_alt_text_the_models_or_made_from_the_title(slack, model):
    model.enqueue(
        tool("run_python", {"code": CHARTS}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Delays by carrier", "alt_text": ALT},
            more=[
                ("attach_file", {"path": "flights.png", "title": "Flights by carrier"}),
                ("attach_file", {"path": "odd.png", "alt_text": HOSTILE}),
                ("attach_file", {"path": "delays.csv", "alt_text": "a table"}),
            ],
        ),
        text("F9 was the most delayed."),
    )
    assert (await slack.event(mention("chart the delays", ts="400.1"))).status_code == 200
    await slack.drain()
    api = slack.api
    asked = {c.args["filename"]: c.args.get("alt_txt") for c in api.of("files.getUploadURLExternal")}
    assert set(asked) == {"delays.png", "flights.png", "odd.png", "delays.csv"}, api.calls
    assert len(api.uploads) == 4 and len(api.of("files.completeUploadExternal")) == 4  # none refused
    assert asked["delays.png"] == ALT
    assert asked["flights.png"] == "Chart: Flights by carrier"  # none given: the title, in words
    assert asked["delays.csv"] is None  # a table has no alt text
    odd = asked["odd.png"]
    assert len(odd.encode()) <= ALT_TXT_LIMIT and odd.endswith("padding…")
    assert "<" not in odd and ">" not in odd  # no <!channel>, <@U…> or <url|label> for Slack to read
    assert odd.startswith("‹!channel› ‹@U0002› see ‹https://evil.example|the real numbers›[2J evil")
    assert not any(c in odd for c in "\x1b\n\u202e")
    # what Slack keeps on the file object: the same words
    assert sorted(api.alt_texts.values()) == sorted(a for a in asked.values() if a is not None)
