"""Setting types that check themselves: URLs, GUIDs, a writable directory, an existing file.

Each check raises ValueError with the end of one sentence ("is not a URL: …"); `load_settings` puts
the variable's name in front, so a bad setting reads "REDIS_URL: is not a Redis URL …" at start,
before any part (Redis, the sandbox, the store) trips over it with a traceback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import AfterValidator, BeforeValidator, SecretStr
from pydantic.fields import FieldInfo

GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
DOMAIN = re.compile(r"^(?=.{4,253}$)([a-zA-Z0-9-]{1,63}\.)+[a-zA-Z]{2,63}$")
SLASH_COMMAND = re.compile(r"^/[a-z0-9_-]{1,31}$")
APP_TYPES = ("SingleTenant", "MultiTenant", "UserAssignedMSI")


def check_http_url(value: str) -> str:
    """An http(s) URL without a login: none of the services these settings name takes one (Slack,
    Teams, S3 and BigQuery take their tokens in headers; the public URL goes into every download
    link), and aiohttp refused a Slack URL with one in a raw ValueError. (Never echoed: it may hold
    a password.)"""
    url = check_http_url_with_login(value)
    if "@" in urlsplit(url).netloc:
        raise ValueError("holds a user name or password (user:password@): leave them out")
    return url


def check_http_url_with_login(value: str) -> str:
    """An http(s) URL that may carry a login: ANTHROPIC_BASE_URL may be a proxy that wants one."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("is not an http(s) URL (expected e.g. https://host/path)")
    return value.strip()


REDIS_EXAMPLE = "expected redis://host:6379/0, rediss://… or unix:///path"
REDIS_DB = re.compile(r"[0-9]+")


def check_redis_url(value: str) -> str:
    """A URL redis-py connects with as written. A port out of range was a 66-line traceback from the
    first command that opened the store (`doctor`: "FAIL ValueError"); a database that is not a number
    (`/abc`, `/0/1`) redis-py quietly reads as database 0, or as another (`/1/2` is 12): on a shared
    Redis, another tenant's. Nothing of the value is echoed: it may hold a password, and a password with
    an unescaped `/`, `#` or `@` spills into the host, port or path."""
    url = value.strip()
    parts = urlsplit(url)
    if parts.scheme == "unix" and parts.path:
        _check_redis_query(parts.query, path_db=None)
    elif parts.scheme in ("redis", "rediss") and parts.hostname:
        try:
            port = parts.port
        except ValueError:  # not a number, or past 65535
            port = 0
        if port == 0:  # redis-py takes port 0 as "no port": 6379
            raise ValueError("has a port that is not a number from 1 to 65535 (e.g. host:6379)")
        path = unquote(parts.path).strip("/")  # redis-py reads `/0/` as 0 too
        if path and not REDIS_DB.fullmatch(path):
            raise ValueError(
                "ends in something that is not a database number (redis-py would quietly use another "
                "database: 0 for /abc): end it with /0, or another number"
            )
        _check_redis_query(parts.query, path_db=int(path) if path else None)
    else:
        raise ValueError(f"is not a Redis URL ({REDIS_EXAMPLE})")
    _check_redis_options(url)
    return url


def _check_redis_query(query: str, *, path_db: int | None) -> None:
    """`?db=` picks the database (the only way for `unix://`): a number, given once, and not against
    the path's. redis-py takes the first of two `?db=` and lets `?db=` win over the path, silently."""
    given = parse_qs(query)
    if twice := next((name for name, values in given.items() if len(values) > 1), None):
        raise ValueError(f"gives ?{twice}= twice: keep one")
    if "db" not in given:
        return
    if not REDIS_DB.fullmatch(given["db"][0]):
        raise ValueError("has a ?db= that is not a database number (e.g. ?db=0)")
    if path_db is not None and int(given["db"][0]) != path_db:
        raise ValueError("names one database at the end of its path and another in ?db=: keep one")


def _check_redis_options(url: str) -> None:
    """The connection redis-py would make of the URL's `?name=value` options, built (not connected):
    an option it does not know or cannot read failed later, at the first command, in a traceback."""
    from redis.asyncio.connection import ConnectionPool
    from redis.exceptions import RedisError

    try:
        ConnectionPool.from_url(url).make_connection()
    except TypeError as exc:  # "…__init__() got an unexpected keyword argument 'name'"
        name = re.search(r"argument '(\w+)'", str(exc))
        option = f"?{name.group(1)}=" if name else "an option"
        raise ValueError(f"has {option}, which redis-py does not take here: remove it") from None
    except ValueError as exc:  # "Invalid value for 'name' in connection URL."
        name = re.search(r"'(\w+)'", str(exc))
        option = f"?{name.group(1)}=" if name else "an option"
        raise ValueError(f"has a value of {option} that redis-py cannot read") from None
    except RedisError:  # "protocol must be either 2 or 3": redis-py's words may quote the value
        raise ValueError("has an option whose value redis-py refuses") from None


def check_slash_command(value: str) -> str:
    if not SLASH_COMMAND.match(value.strip()):
        raise ValueError("is not a slash command (expected a / and a lowercase name, like /ask)")
    return value.strip()


def check_guid(value: str) -> str:
    if not GUID.match(value.strip()):
        raise ValueError(
            f"{value!r} is not a GUID (the Azure app registration's Application (client) ID, "
            "like 00000000-0000-0000-0000-000000000000)"
        )
    return value.strip()


def check_tenant(value: str) -> str:
    if not (GUID.match(value.strip()) or DOMAIN.match(value.strip())):
        raise ValueError(f"{value!r} is not a tenant id (a GUID, or a domain like contoso.onmicrosoft.com)")
    return value.strip()


def to_app_type(value: object) -> object:
    """Accept any capitalisation of the three app types Azure Bot Service knows."""
    if isinstance(value, str):
        for known in APP_TYPES:
            if value.strip().lower() == known.lower():
                return known
        raise ValueError(f"{value!r} is not one of {', '.join(APP_TYPES)}")
    return value


def empty_as_default(field: FieldInfo, value: object) -> object:
    """An empty value (`NAME=`, an uncommented line of .env.example) as the setting's default, where
    the default is not a value one could have written on that line: unset (ANTHROPIC_BASE_URL= is
    the default endpoint, not a bad URL; SLACK_BOT_TOKEN= is no token rather than an empty one) or
    computed from the host (DATATHREAD_TURN_WORKERS= was refused as "not a valid integer", and its
    line can show no number that is right on every host). A setting with a fixed default keeps its
    own check of an empty value (DATATHREAD_PUBLIC_URL= is still an error): its line shows the value."""
    if not isinstance(value, str) or value.strip():
        return value
    if field.default_factory is not None:
        return field.get_default(call_default_factory=True)
    return None if field.default is None else value


def literal_choices(annotation: object) -> tuple[str, ...]:
    """The words a `Literal[...]` setting takes (inside `| None` or `Annotated` too); () for any other."""
    if get_origin(annotation) is Literal:
        return tuple(c for c in get_args(annotation) if isinstance(c, str))
    return tuple(c for inner in get_args(annotation) for c in literal_choices(inner))


def as_choice_spelled(annotation: object, value: object) -> object:
    """`value` as the one choice of a `Literal` setting it matches in any case and without surrounding
    space (`STRICT`, `Modal `), spelled as the contract spells it; else unchanged, for the field's own
    check to refuse. Choices that differ only by case would be ambiguous: those stay exact."""
    if not isinstance(value, str):
        return value
    matches = [c for c in literal_choices(annotation) if c.casefold() == value.strip().casefold()]
    return matches[0] if len(matches) == 1 else value


def time_zone_named(value: str) -> str | None:
    """The IANA zone `value` names, spelled as the database spells it: `utc` is UTC and
    `europe/berlin` Europe/Berlin (people type zones in lower case; zoneinfo finds them by file name,
    case-sensitive on Linux and not on macOS, so a zone stored as typed could fail on another host);
    None for no zone."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

    name = value.strip()
    if name == "UTC":  # the default, read at every start: no walk of the zone directory
        return name
    if zone := {zone.lower(): zone for zone in available_timezones()}.get(name.lower()):
        return zone
    try:  # a name this host knows outside the list (an alias of its own tzdata)
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return name


def close_time_zone(value: str) -> str | None:
    """The known zone closest to a misspelt one (Europe/Berln → Europe/Berlin), for the refusal."""
    from difflib import get_close_matches
    from zoneinfo import available_timezones

    zones = {zone.lower(): zone for zone in available_timezones()}
    match = get_close_matches(value.strip().lower(), list(zones), n=1, cutoff=0.8)
    return zones[match[0]] if match else None


def check_time_zone(value: str) -> str:
    if (zone := time_zone_named(value)) is None:
        raise ValueError("is not a time zone (expected an IANA name like Europe/Berlin or UTC)")
    return zone


NOT_A_DIRECTORY = "exists and is not a directory"


def check_writable_dir(value: Path) -> Path:
    """A directory we can write in, or one we could create: never created here (no side effects). One
    that cannot be created is said not to exist first: `export -o /missing/dir/x.ipynb` was refused as
    "not writable", which sent people to check permissions rather than the path they had typed."""
    path = value.expanduser()
    try:  # Python 3.11's exists() raises on a parent this user may not search (/root/x as a user)
        if path.exists() and not path.is_dir():
            raise ValueError(NOT_A_DIRECTORY)
        probe = path.absolute()  # messages name real directories, not "."
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
    except PermissionError:
        raise ValueError("cannot be reached: a directory above it is not readable by this user") from None
    missing = "does not exist, and cannot be created:"
    if not probe.is_dir():
        raise ValueError(f"{missing} {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        where = "is" if probe == path.absolute() else f"{missing} {probe} is"
        raise ValueError(f"{where} not writable by this user")
    return path


# What datathread makes inside DATATHREAD_HOME and writes to later (logs, the demo warehouse, session
# workspaces, attachments saved for the terminal). The state database is a file: its own check.
HOME_PARTS = ("logs", "warehouse", "workspaces", "attachments")
ELSEWHERE = "set DATATHREAD_HOME to a folder you can write, e.g. DATATHREAD_HOME=~/.datathread"


def check_state_home(value: Path) -> Path:
    """A writable directory (`check_writable_dir`) whose parts, where they exist, are writable too.

    A part another user made — a `sudo datathread chat` leaves `logs/` and `warehouse/` owned by
    root — failed the next ordinary run with a traceback from deep inside (logging, DuckDB).

    One this user cannot write or create — the default ./.datathread of a checkout another user owns —
    says where to go instead: the sentence named the problem and left the way out to be guessed."""
    try:
        path = check_writable_dir(value)
    except ValueError as exc:
        if str(exc) == NOT_A_DIRECTORY:  # a file in the way: moving it is the fix
            raise
        raise ValueError(f"{exc}; {ELSEWHERE}") from None
    for part in HOME_PARTS:
        inside = path / part
        try:
            if not inside.exists():
                continue
            usable = inside.is_dir() and os.access(inside, os.W_OK | os.X_OK)
        except PermissionError:
            usable = False
        if not usable:
            raise ValueError(
                f"has a {part}/ folder this user cannot write ({inside.absolute()}; {_whose(inside)})"
            )
    return path


def _whose(folder: Path) -> str:
    """What to do about a part this user cannot write: theirs but read-only (chmod), or another user's
    (chown) — it guessed "another user" for a folder the user had made read-only themselves."""
    try:
        mine = folder.stat().st_uid == os.geteuid()
    except OSError:
        mine = False
    if mine:
        return "it is read-only: make it writable with chmod u+w, or set DATATHREAD_HOME elsewhere"
    return (
        "made by another user, a sudo run perhaps: give it back with chown, or set DATATHREAD_HOME elsewhere"
    )


def check_existing_file(value: Path) -> Path:
    path = value.expanduser()
    if not path.is_file():
        raise ValueError("is not a file")
    if not os.access(path, os.R_OK):
        raise ValueError("is not readable by this user")
    return path


def check_header_secret(value: SecretStr) -> SecretStr:
    """A key or token travels in an HTTP header, so a character a header cannot carry is a copying
    mistake: a non-ASCII one (a typographic quote, a letter copied with it) made `ask` say "could not
    reach the Claude API" and `doctor` print a raw UnicodeEncodeError; a space or quote inside, one the
    service refuses. No Slack token or signing secret has such characters either. (Surrounding
    whitespace is already dropped; the secret itself is never echoed.)"""
    key = value.get_secret_value()
    if not key.isascii():
        raise ValueError("contains a character that is not ASCII (a typographic quote?): copy it again")
    if any(c.isspace() or c in "\"'" for c in key):
        raise ValueError("contains a space or a quote inside it: copy it again")
    return value


HeaderSecret = Annotated[SecretStr, AfterValidator(check_header_secret)]
HttpUrl = Annotated[str, AfterValidator(check_http_url)]
HttpUrlWithLogin = Annotated[str, AfterValidator(check_http_url_with_login)]
RedisUrl = Annotated[str, AfterValidator(check_redis_url)]
SlashCommand = Annotated[str, AfterValidator(check_slash_command)]
Guid = Annotated[str, AfterValidator(check_guid)]
TenantId = Annotated[str, AfterValidator(check_tenant)]
AppType = Annotated[str, BeforeValidator(to_app_type)]
TimeZone = Annotated[str, AfterValidator(check_time_zone)]


def refuse_empty_path(value: object) -> object:
    """`DATATHREAD_HOME=` (the line uncommented, nothing after it) would be Path("") — the working
    directory — and scatter the state database and folders there: refused in a sentence instead."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("is empty: remove the line for the default (./.datathread) or name a folder")
    return value


StateHome = Annotated[Path, BeforeValidator(refuse_empty_path), AfterValidator(check_state_home)]


def check_model_id(value: str) -> str:
    """`DATATHREAD_MODEL=` (the .env.example line uncommented, nothing after it) was taken as the model
    id "", and every question then failed with "model not found": refused like the other empties."""
    if not value.strip():
        raise ValueError("is empty: remove the line for the default model, or name one")
    return value.strip()


ModelId = Annotated[str, AfterValidator(check_model_id)]
ExistingFile = Annotated[Path, AfterValidator(check_existing_file)]


def split_list(value: str) -> tuple[str, ...]:
    """Comma-separated setting → tuple of trimmed, non-empty items."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


CHANNEL_DATASETS_EXAMPLE = "C123=myproj.finance|myproj.shared_*;C456=myproj.ops"


def parse_channel_datasets(value: str) -> dict[str, tuple[str, ...]]:
    """'C1=proj.finance|proj.shared_*;C2=proj.ops' → {'C1': ('proj.finance', 'proj.shared_*'), ...}.

    Strict, because each way this went wrong widened or silently kept access: an entry that was not
    `CHANNEL=patterns` was dropped (that channel kept the default datasets), and `C1=` gave C1 an empty
    allowlist, which means every dataset of GCP_PROJECT — wider than the default it meant to narrow."""
    out: dict[str, tuple[str, ...]] = {}
    for entry in value.split(";"):
        if not entry.strip():
            continue  # a trailing or doubled ';'
        channel, sep, listed = entry.partition("=")
        channel = channel.strip()
        patterns = tuple(p.strip() for p in listed.split("|") if p.strip())
        if not sep or not channel:
            raise ValueError(f"{entry.strip()!r} is not CHANNEL=patterns (e.g. {CHANNEL_DATASETS_EXAMPLE})")
        if not patterns:
            raise ValueError(
                f"gives channel {channel} no datasets, which would mean all of them (to keep a channel "
                "out, leave it out of DATATHREAD_ALLOWED_CHANNELS)"
            )
        if channel in out:
            raise ValueError(f"names channel {channel} twice")
        out[channel] = patterns
    return out


def check_channel_datasets(value: str) -> str:
    parse_channel_datasets(value)
    return value


ChannelDatasets = Annotated[str, AfterValidator(check_channel_datasets)]
