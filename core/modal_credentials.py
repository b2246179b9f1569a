"""Whether this process has Modal credentials, found without the network and without importing modal.

`DATATHREAD_SANDBOX=modal` without them started fine and failed at the first step, deep in the Modal
client ("Token missing"). The CLI asks here first and stops in one sentence. The lookup is the Modal
client's own (modal/config.py and `_Client.from_env` in modal 1.x): each setting from `MODAL_<NAME>`,
else from the active profile of `MODAL_CONFIG_PATH` or `~/.modal.toml` (`MODAL_PROFILE`, else the
profile marked `active = true`, else `default`); a token id and secret, or an OAuth refresh token and
client id with a client secret or JWT key. Inside a Modal container the container's own identity is
used and none are needed (`MODAL_IS_REMOTE=1`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

SET_THEM = "set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or run `modal token new` (it writes ~/.modal.toml)"


def missing_credentials(env: Mapping[str, str], user_home: Path) -> str | None:
    """None when the Modal client will find credentials; else one sentence saying what to set."""
    if env.get("MODAL_IS_REMOTE") == "1":
        return None
    path = Path(env.get("MODAL_CONFIG_PATH") or user_home / ".modal.toml")
    try:
        profiles = tomllib.loads(path.read_text()) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return f"DATATHREAD_SANDBOX=modal, but the Modal settings file {path} cannot be read ({exc})."
    if not all(isinstance(p, dict) for p in profiles.values()):
        return f"DATATHREAD_SANDBOX=modal, but {path} is not a Modal settings file (one table per profile)."
    name = env.get("MODAL_PROFILE") or next(
        (key for key, p in profiles.items() if p.get("active") is True), "default"
    )
    profile = profiles.get(name, {})

    def given(key: str) -> bool:
        return bool(env.get(f"MODAL_{key.upper()}") or profile.get(key))

    tokens = given("token_id") and given("token_secret")
    oauth = (
        given("oauth_refresh_token")
        and given("oauth_client_id")
        and given("oauth_client_secret") != given("oauth_jwt_key")
    )
    if tokens or oauth:
        return None
    if env.get("MODAL_PROFILE") and name not in profiles:
        return f"DATATHREAD_SANDBOX=modal, but MODAL_PROFILE={name} is not a profile in {path}: {SET_THEM}."
    return f"DATATHREAD_SANDBOX=modal needs Modal credentials: {SET_THEM}."
