"""slack/manifest.yml asks for exactly the OAuth scopes the code needs: the Web API methods called
anywhere under bot/ (read from the source with the AST) and the events it listens to, each mapped to
its scope below. A new method or event fails this test until its scope is added to the table (and to
the manifest) — the table is the only place to edit."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from bot.slack_socket import SLACK_TOKENS

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = yaml.safe_load((ROOT / "slack" / "manifest.yml").read_text())

# slack_sdk method (as called in the code) → bot scopes it needs. https://docs.slack.dev/reference/methods
METHOD_SCOPES: dict[str, set[str]] = {
    "auth_test": set(),
    "chat_postMessage": {"chat:write"},
    "chat_postEphemeral": {"chat:write"},
    "chat_update": {"chat:write"},
    "chat_delete": {"chat:write"},  # its own messages (a status the answer could not replace)
    "chat_startStream": {"chat:write"},
    "chat_appendStream": {"chat:write"},
    "chat_stopStream": {"chat:write"},
    "files_upload_v2": {"files:write"},  # files.getUploadURLExternal + files.completeUploadExternal
    "files_info": {"files:read"},  # and the files:read a shared file's url_private_download needs
    "assistant_threads_setStatus": {"assistant:write"},
    "assistant_threads_setSuggestedPrompts": {"assistant:write"},
    "assistant_threads_setTitle": {"assistant:write"},
    "views_publish": set(),
    "users_info": {"users:read"},
    "conversations_replies": {"channels:history", "groups:history", "im:history", "mpim:history"},
    "conversations_history": {"channels:history", "groups:history", "im:history", "mpim:history"},
    "reactions_add": {"reactions:write"},
}
# Called with the app-level token (Socket Mode), whose scope is not a bot scope.
APP_TOKEN_METHODS = {"apps_connections_open"}
# Event subscription → bot scope. https://docs.slack.dev/reference/events
EVENT_SCOPES: dict[str, set[str]] = {
    "app_mention": {"app_mentions:read"},
    "app_home_opened": set(),
    "app_uninstalled": set(),  # https://docs.slack.dev/reference/events/app_uninstalled: no scope
    "tokens_revoked": set(),
    "assistant_thread_started": {"assistant:write"},
    "assistant_thread_context_changed": {"assistant:write"},
    "file_deleted": {"files:read"},  # https://docs.slack.dev/reference/events/file_deleted
    "message.channels": {"channels:history"},
    "message.groups": {"groups:history"},
    "message.im": {"im:history"},
    "message.mpim": {"mpim:history"},
}
# A Bolt listener for "message" receives all four message.* subscriptions.
LISTENER_EVENTS = {"message": {"message.channels", "message.groups", "message.im", "message.mpim"}}
WEB_API = re.compile(
    r"^(admin|apps|assistant|auth|bookmarks|bots|chat|conversations|dnd|emoji|files|pins|"
    r"reactions|reminders|search|stars|team|usergroups|users|views)_[A-Za-z0-9_]+$"
)


def called_methods() -> set[str]:
    """Every `<something>.<web_api_method>(...)` call in bot/, plus the token checks (called via getattr)."""
    found = {method for _, _, method, _ in SLACK_TOKENS}
    for path in (ROOT / "bot").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and WEB_API.match(node.func.attr)
            ):
                found.add(node.func.attr)
    return found


def listened_events() -> set[str]:
    """Events of `@app.event("...")` listeners in bot/slack_app.py."""
    tree = ast.parse((ROOT / "bot" / "slack_app.py").read_text())
    names = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "event"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    return set().union(*(LISTENER_EVENTS.get(name, {name}) for name in names))


def test_every_called_method_has_a_known_scope():
    unknown = called_methods() - set(METHOD_SCOPES) - APP_TOKEN_METHODS
    assert unknown == set(), "add these Slack methods and their scopes to METHOD_SCOPES (and the manifest)"
    assert {"chat_postMessage", "files_upload_v2", "auth_test"} <= called_methods()  # the scan sees calls


def test_manifest_subscribes_to_exactly_the_events_the_app_listens_to():
    subscribed = set(MANIFEST["settings"]["event_subscriptions"]["bot_events"])
    assert subscribed == listened_events()
    assert subscribed <= set(EVENT_SCOPES)


def test_manifest_scopes_are_exactly_what_the_code_uses():
    needed = set().union(*(METHOD_SCOPES[m] for m in called_methods() - APP_TOKEN_METHODS))
    needed |= set().union(
        *(EVENT_SCOPES[e] for e in MANIFEST["settings"]["event_subscriptions"]["bot_events"])
    )
    if MANIFEST["features"].get("slash_commands"):
        needed.add("commands")
    assert sorted(MANIFEST["oauth_config"]["scopes"]["bot"]) == sorted(needed)


def test_doctor_checks_exactly_the_manifests_scopes():
    """`datathread doctor` fails a token without one of them; it keeps its own copy (the manifest is not
    installed with the package)."""
    from bot.doctor_chat import BOT_SCOPES

    assert sorted(BOT_SCOPES) == sorted(MANIFEST["oauth_config"]["scopes"]["bot"])


def test_users_read_is_described_as_what_the_access_rules_depend_on():
    """`users:read` was described as the asker's time zone for schedules, in the manifest and in
    doctor's line for a token without it, but whether someone may ask depends on `users.info` too:
    without it, people Slack's payload does not place in the workspace are refused (everyone, while
    guests are refused)."""
    from bot.doctor_chat import BOT_SCOPES

    [line] = [s for s in (ROOT / "slack" / "manifest.yml").read_text().splitlines() if "- users:read" in s]
    for said in (BOT_SCOPES["users:read"], line):
        assert "who may ask" in said, said
