"""What the core says about a shared file that did not come in (a `TurnNote`) reaches the person in
Teams, below the answer, whatever the model wrote: the real core and the real Teams sink and
botframework connector client, the fake Bot Connector at the network boundary. (How Teams fetches a
file into the message is the Teams surface's; this is how the core's sentence is drawn.)"""

from __future__ import annotations

import pytest
from botbuilder.schema import ChannelAccount, ConversationAccount, ConversationReference
from botframework.connector.aio import ConnectorClient
from botframework.connector.auth import MicrosoftAppCredentials

from bot.teams_out import TeamsOut
from bot.teams_progress import TeamsSink
from core.events import IncomingMessage, SharedFile
from tests.bot.teams_harness import BOT, CHAT
from tests.fakes.anthropic_api import text

SALES = b"region,amount\nnorth,10\nsouth,5\n"


@pytest.mark.parametrize(
    "name,shown",
    [
        ("deck.pptx", "deck.pptx"),
        ("<at>Ada</at><img src=x>.pptx", "&lt;at&gt;Ada&lt;/at&gt;&lt;img src=x&gt;.pptx"),
    ],
    ids=["plain", "markup in the name"],
)
async def test_a_note_about_a_shared_file_is_below_the_teams_answer(teams, fake_model, name, shown):
    """Below the answer, and inert: a note quotes the file's name (and a parser's error line, which
    quotes its cells), whoever made them — an `<at>` there mentioned someone, a tag was drawn."""
    connector = ConnectorClient(MicrosoftAppCredentials(None, None), base_url=teams.connector.url)
    reference = ConversationReference(
        channel_id="msteams",
        service_url=teams.connector.url,
        conversation=ConversationAccount(id=CHAT, conversation_type="personal"),
        bot=ChannelAccount(id=BOT["id"], name=BOT["name"]),
    )
    sink = TeamsSink(
        threads=teams.state.threads,
        links=teams.state.links,
        out=TeamsOut(connector=connector, reference=reference),
        personal=True,
    )
    fake_model.enqueue(text("North sold 10."))
    refused = SharedFile(name, refusal="A .pptx file is not one I can read; I read csv.")
    message = IncomingMessage(
        text="who sold most?",
        surface="teams",
        thread_key=(CHAT,),
        user_id="29:ada",
        files=(SharedFile("sales.csv", SALES), refused),
    )
    try:
        outcome = await teams.state.analyst.handle(message, sink)
    finally:
        await connector.__aexit__(None, None, None)
    assert outcome.ok, outcome.error
    answer = teams.connector.sent(CHAT)[-1]["text"]
    assert answer.startswith("North sold 10.")
    assert answer.endswith(f"_I didn't read `{shown}`: A .pptx file is not one I can read; I read csv._")
