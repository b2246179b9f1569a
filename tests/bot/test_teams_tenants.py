"""Which Teams tenants a bot answers, through the real Teams surface: Bot Framework activities as Teams
sends them from the host tenant (a member, a guest from another organisation) and from another
tenant that installed the app, the scripted model, and the fake Bot Connector recording the replies."""

from __future__ import annotations

import json

from tests.bot.teams_harness import THREAD, activity, serve_teams
from tests.fakes.anthropic_api import text
from tests.fakes.bot_connector import account

HOME = "8a1d2c3b-0000-4000-8000-00000000aaaa"
OTHER = "77777777-0000-4000-8000-00000000bbbb"
REFUSED = "datathread isn't enabled for your organization's Teams"


def in_tenant(body: dict, tenant: str) -> dict:
    """The activity as it comes from a conversation of `tenant` (Teams names it twice)."""
    body["conversation"]["tenantId"] = tenant
    body["channelData"]["tenant"] = {"id": tenant}
    return body


async def test_a_single_tenant_bot_answers_its_own_tenant_and_its_guests_only(settings, fake_model):
    """A SingleTenant bot with DATATHREAD_ALLOWED_TEAMS empty answered people of any tenant that had its
    app. Now only its own tenant's conversations are answered: a guest from another organisation asks
    in them (the conversation's tenant is the host's), a conversation of another tenant is refused."""
    one_tenant = settings.model_copy(
        update={"microsoft_app_type": "SingleTenant", "microsoft_app_tenant_id": HOME}
    )
    fake_model.enqueue(text("336,776 flights."), text("16 carriers."))
    async with serve_teams(one_tenant) as teams:
        # who Teams says they are: Ada of the home tenant, Grace its guest (answered: DATATHREAD_ALLOW_GUESTS)
        teams.connector.members = [
            account("29:ada", "aad-ada", "Ada Lovelace", tenant=HOME),
            account("29:guest", "aad-guest-in-home", "Grace Fabrikam", tenant=HOME, role="guest"),
        ]

        async def said(body: dict) -> str:
            before = len(teams.connector.sent())
            assert (await teams.post(body)).status_code == 202
            await teams.state.runner.drain(timeout=60)
            return json.dumps(teams.connector.sent()[before:])

        url = teams.connector.url
        assert "336,776" in await said(in_tenant(activity(url, "how many flights?"), HOME))
        guest = in_tenant(activity(url, "how many carriers?", conversation=THREAD), HOME)
        guest["from"] = {"id": "29:guest", "name": "Grace (Fabrikam)", "aadObjectId": "aad-guest-in-home"}
        assert "16 carriers" in await said(guest)
        elsewhere = in_tenant(activity(url, "show me payroll", conversation=THREAD), OTHER)
        assert REFUSED in await said(elsewhere)
        assert len(fake_model.requests) == 2  # the refused question never reached the model


async def test_a_multi_tenant_bot_answers_any_tenant_that_installs_it(settings, fake_model):
    """Unchanged for MultiTenant (docs and doctor say so): DATATHREAD_ALLOWED_TEAMS is what limits it."""
    many = settings.model_copy(update={"microsoft_app_type": "MultiTenant", "microsoft_app_tenant_id": HOME})
    fake_model.enqueue(text("336,776 flights."))
    async with serve_teams(many) as teams:
        replies = await teams.say("how many flights?")  # from tenant-1, the harness's
        assert "336,776" in json.dumps(replies)
