"""The channel's signing keys, which every Teams request's token is checked against: fetched within a
deadline, kept when a later fetch fails, shared by the requests that wait for them.

Why not botframework-connector's own cache (`jwt_token_extractor._OpenIdMetadata`): it fetches the
OpenID metadata and the key set with `requests.get` and no timeout, inside its async check. A key
endpoint that accepted the connection and never answered (a proxy, a firewall that drops packets)
held that fetch, and the one thread checking tokens, for good: every later Teams message was refused
after the check's deadline until the process restarted, while `/healthz` stayed green. Here a fetch
is an `httpx` request on the checking thread's own loop, abandoned at `FETCH_DEADLINE_S` (its
connection closed), and the next request tries again.

The SDK finds its cache per URL in `JwtTokenExtractor.metadataCache` and asks only
`await metadata.get(key_id)` of it, for an object with `public_key` and `endorsements`;
`bot/teams_auth.py` puts a `SigningKeys` there for every URL the SDK checks tokens against. No SDK
import here: `datathread doctor` fetches the keys with `fetch_keys` too.
https://learn.microsoft.com/azure/bot-service/rest-api/bot-framework-rest-connector-authentication
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from jwt.algorithms import RSAAlgorithm

from core.config import Settings
from core.wording import counted

log = logging.getLogger("datathread.teams")

# Where the Bot Framework publishes the keys of the channel's tokens (botframework-connector's
# AuthenticationConstants.TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL).
CHANNEL_METADATA_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
FETCH_DEADLINE_S = 5.0  # the metadata and the key set together; a request's check waits 10 s at most
REFRESH_AFTER_S = 24 * 3600.0  # as botbuilder: keys older than a day are fetched again
RETRY_AFTER_S = 60.0  # a failed refresh while keys are held: the held keys serve meanwhile
# A token naming a key id we don't hold fetches the keys again, at most this often: Microsoft may
# sign with a new key before our daily refresh has seen it, and anyone may send a made-up key id.
UNKNOWN_KEY_REFRESH_S = 30.0

KeysState = Literal["loaded", "not loaded", "not fetched yet"]


class SigningKeysUnavailable(PermissionError):
    """No signing keys could be fetched, so no token can be checked (the request is refused)."""


class UnknownSigningKey(PermissionError):
    """The token names a key id (`kid`) that is not among the channel's signing keys."""


@dataclass(frozen=True)
class SigningKey:
    """What the SDK's token check reads of a key (the shape of its own `_OpenIdConfig`)."""

    public_key: Any
    endorsements: list[str]


class SigningKeys:
    """The keys published at one OpenID metadata URL, as the SDK's token check asks for them.

    Used from the one thread that checks tokens (`bot/teams_auth.py` `AuthLoop`); `state()` may be
    read from any thread. At most one fetch runs at a time: requests that need the keys meanwhile wait
    for that one (each up to its own deadline) instead of starting more."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._clock = clock
        self._keys: dict[str, dict] = {}
        self._fetched_at: float | None = None  # the clock at the last fetch that succeeded
        self._failed_at: float | None = None  # the clock at the last fetch that failed, if after it
        self._failure = ""  # why the last fetch failed, in words
        self._fetch: asyncio.Task | None = None
        self._fetch_started: float | None = None  # the clock when the last fetch began

    def state(self) -> KeysState:
        """For `/healthz`: whether tokens can be checked now (the keys are fetched at the first request)."""
        if self._keys:
            return "loaded"
        return "not loaded" if self._failed_at is not None else "not fetched yet"

    async def get(self, key_id: str | None) -> SigningKey:
        """The key the token names; SigningKeysUnavailable or UnknownSigningKey (both refusals) if none."""
        if not self._keys:
            await self._refreshed()
            if not self._keys:
                raise SigningKeysUnavailable(
                    f"the channel's signing keys could not be fetched from {self.url}: {self._failure}"
                )
        elif self._stale():
            self._start_fetch()  # in the background: the held keys check this request
        if not key_id:
            raise UnknownSigningKey("the token names no signing key (no kid)")
        if key_id not in self._keys and self._may_look_again():
            log.info("a token signed with a key id we don't know yet (%s): refreshing the keys", key_id)
            await self._refreshed()
        if key_id not in self._keys:
            raise UnknownSigningKey(f"the token is signed with a key id we do not know ({key_id})")
        key = self._keys[key_id]
        return SigningKey(RSAAlgorithm.from_jwk(json.dumps(key)), list(key.get("endorsements") or []))

    def _may_look_again(self) -> bool:
        """A fetch is under way (joined), or the last began at least UNKNOWN_KEY_REFRESH_S ago.
        botbuilder meant to refresh for an unknown key id at most hourly, but its lookup raised
        IndexError for one before that branch ran: a rotated key was refused until the daily refresh."""
        if self._fetch is not None and not self._fetch.done():
            return True
        started = self._fetch_started
        return started is None or self._clock() - started >= UNKNOWN_KEY_REFRESH_S

    def _stale(self) -> bool:
        now = self._clock()
        if self._failed_at is not None and now - self._failed_at < RETRY_AFTER_S:
            return False
        return self._fetched_at is None or now - self._fetched_at >= REFRESH_AFTER_S

    async def _refreshed(self) -> None:
        """Wait for a fetch (the one under way, or a new one). Shielded: a request that gives up at its
        own deadline leaves the fetch to finish within its own, for the requests after it."""
        await asyncio.shield(self._start_fetch())

    def _start_fetch(self) -> asyncio.Task:
        running = self._fetch
        if running is None or running.done() or running.get_loop() is not asyncio.get_running_loop():
            running = self._fetch = asyncio.get_running_loop().create_task(self._fetch_now())
            self._fetch_started = self._clock()
        return running

    async def _fetch_now(self) -> None:
        """One fetch; whatever fails is kept in words (for the refusal, `/healthz` and the log), never
        left as its task's exception: a refresh in the background has nobody to retrieve it."""
        try:
            keys = await fetch_keys(self.url, deadline_s=FETCH_DEADLINE_S)
        except Exception as exc:
            if not isinstance(exc, KeysNotFetched):
                exc = KeysNotFetched(f"{type(exc).__name__}: {exc}")
            self._failed_at, self._failure = self._clock(), str(exc)
            held = (
                f"; the {counted(len(self._keys), 'key')} fetched before serve meanwhile"
                if self._keys
                else ""
            )
            log.warning("the channel's signing keys could not be fetched from %s: %s%s", self.url, exc, held)
            return
        self._keys, self._fetched_at, self._failed_at = keys, self._clock(), None


class KeysNotFetched(Exception):
    """Why the metadata or the key set could not be fetched, in words."""


async def fetch_keys(url: str, *, deadline_s: float) -> dict[str, dict]:
    """The key set (`kid` → JWK) published by the OpenID metadata at `url`, both fetched within
    `deadline_s` together; KeysNotFetched with the reason otherwise. Used by `doctor` too."""
    try:
        async with asyncio.timeout(deadline_s):
            # made off the loop: loading the CA bundle takes a few hundred milliseconds
            async with await asyncio.to_thread(httpx.AsyncClient, timeout=deadline_s) as client:
                metadata = (await client.get(url)).raise_for_status().json()
                jwks_uri = metadata.get("jwks_uri") if isinstance(metadata, dict) else None
                if not isinstance(jwks_uri, str):
                    raise KeysNotFetched(f"{url} is not OpenID metadata (no jwks_uri)")
                found = (await client.get(jwks_uri)).raise_for_status().json()
    except TimeoutError:
        raise KeysNotFetched(f"no answer within {deadline_s:g} s") from None
    except httpx.HTTPStatusError as exc:
        where = urlsplit(str(exc.request.url)).hostname
        raise KeysNotFetched(f"{where} answered HTTP {exc.response.status_code}") from None
    except httpx.HTTPError as exc:
        raise KeysNotFetched(f"could not be reached ({type(exc).__name__})") from None
    except ValueError:  # the body is not JSON
        raise KeysNotFetched("the answer is not JSON") from None
    keys = found.get("keys") if isinstance(found, dict) else None
    keys = keys if isinstance(keys, list) else []  # a number iterated was a TypeError, no failed fetch
    usable = {k["kid"]: k for k in keys if isinstance(k, dict) and isinstance(k.get("kid"), str)}
    if not usable:
        raise KeysNotFetched(f"{jwks_uri} lists no signing keys")
    return usable


def channel_metadata_url(settings: Settings) -> str:
    """Where the keys of the channel's tokens are published (a string: the SDK keys its cache by it)."""
    return str(settings.bot_openid_metadata_url or CHANNEL_METADATA_URL)
