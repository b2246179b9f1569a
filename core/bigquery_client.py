"""BigQuery credentials and client construction.

Credentials come from, in order: `GCP_SERVICE_ACCOUNT_JSON` (the key's JSON, or base64 of it, held in
memory only — never written to disk, so no sandbox or neighbour can read a key file), the file named by
`GOOGLE_APPLICATION_CREDENTIALS`, or application default credentials (workload identity, gcloud).
With `DATATHREAD_BIGQUERY_API_URL` set and no credentials, anonymous credentials are used (emulators,
tests). The billing project (`GCP_PROJECT`) runs the jobs; the data may live in other projects.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.config import ConfigError, Settings
from core.daemon_thread import CallDeadline, in_daemon_thread, within

SCOPES = ("https://www.googleapis.com/auth/bigquery",)
T = TypeVar("T")


@dataclass(frozen=True)
class ClientConfig:
    """What a BigQuery client needs, resolved from settings once."""

    project: str
    credentials: Any
    location: str | None = None
    api_url: str | None = None


def _service_account_info(raw: str) -> dict:
    """Parse the service-account key from JSON or base64 JSON (env vars mangle newlines otherwise)."""
    text = raw.strip()
    if not text.startswith("{"):
        try:
            text = base64.b64decode(text, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ConfigError(
                "GCP_SERVICE_ACCOUNT_JSON is neither JSON nor base64 JSON: paste the key file's contents."
            ) from None
    try:
        info = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(
            "GCP_SERVICE_ACCOUNT_JSON is not valid JSON: paste the key file's contents."
        ) from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise ConfigError("GCP_SERVICE_ACCOUNT_JSON must be a service-account key (type service_account).")
    return info


def build_credentials(settings: Settings) -> tuple[Any, str | None]:
    """(credentials, project the credentials name) from the settings; raises ConfigError in one sentence."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.oauth2 import service_account

    if settings.gcp_service_account_json is not None:
        info = _service_account_info(settings.gcp_service_account_json.get_secret_value())
        try:
            creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
        except (ValueError, KeyError) as exc:
            raise ConfigError(
                f"GCP_SERVICE_ACCOUNT_JSON is not a usable service-account key{_flaw(exc)}."
            ) from None
        return creds, info.get("project_id")
    if settings.google_application_credentials is not None:
        return credentials_from_file(settings.google_application_credentials)
    if settings.bigquery_api_url:
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials(), None
    try:
        return google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError:
        # A newcomer sets both: the project as well, when it is missing too (else the next run stops on it)
        also = (
            "" if settings.gcp_project else " (and GCP_PROJECT, the project that runs and pays for queries)"
        )
        raise ConfigError(
            "No Google credentials for BigQuery: set GCP_SERVICE_ACCOUNT_JSON or "
            f"GOOGLE_APPLICATION_CREDENTIALS{also}, or run where application default credentials exist."
        ) from None


# The key file's `type` → how it is loaded, each by its own constructor: google.auth's generic
# load_credentials_from_file is deprecated as a security risk (it loads whatever type a file claims,
# https://cloud.google.com/docs/authentication/external/externally-sourced-credentials). These are the
# types a person sets up for BigQuery: a service-account key, `gcloud auth application-default login`
# (authorized_user, or impersonated_service_account with --impersonate-service-account), workload
# identity federation (external_account, external_account_authorized_user).
KEY_FILE_TYPES = (
    "service_account",
    "authorized_user",
    "impersonated_service_account",
    "external_account",
    "external_account_authorized_user",
)
AWS_SUBJECT_TOKEN = "urn:ietf:params:aws:token-type:aws4_request"


def credentials_from_file(path: Path) -> tuple[Any, str | None]:
    """(credentials, the key's project) from GOOGLE_APPLICATION_CREDENTIALS, by the file's `type`;
    raises ConfigError in one sentence for a file that is missing, unreadable, no JSON, of a type
    datathread does not load, or that its type's constructor refuses."""
    name = f"GOOGLE_APPLICATION_CREDENTIALS ({path})"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:  # settings checked it existed; it went since
        raise ConfigError(f"{name} does not exist: name a credentials JSON file.") from None
    except OSError as exc:  # its permissions, a directory in its place
        why = (exc.strerror or type(exc).__name__).lower()
        raise ConfigError(f"{name} could not be read ({why}).") from None
    try:
        info = json.loads(raw)
    except ValueError:  # not JSON, or not text at all
        info = None
    kind = info.get("type") if isinstance(info, dict) else None
    if not isinstance(kind, str):
        raise ConfigError(f"{name} is not a service-account JSON key file.")
    if kind not in KEY_FILE_TYPES:
        raise ConfigError(
            f"{name} holds {kind!r} credentials, which datathread does not load: use a service-account "
            f"key, or one of {', '.join(KEY_FILE_TYPES[1:])}."
        )
    try:
        return _load_key(kind, info)
    # AttributeError, TypeError: a field of the wrong JSON type (a string where google wants an object)
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        what = f"holds no usable {kind} credentials"
        if kind == "service_account":  # the usual case, said as people know it
            what = "is not a service-account JSON key file"
        raise ConfigError(f"{name} {what}{_flaw(exc, kind)}.") from None


def _load_key(kind: str, info: dict) -> tuple[Any, str | None]:
    """One credentials type's own constructor. No call goes out here: an external account's project
    (which google.auth looked up over the network) comes from GCP_PROJECT instead."""
    if kind == "service_account":
        from google.oauth2 import service_account

        creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
        return creds, info.get("project_id")
    if kind == "authorized_user":
        from google.oauth2 import credentials

        return credentials.Credentials.from_authorized_user_info(info, scopes=SCOPES), None
    if kind == "impersonated_service_account":
        from google.auth import impersonated_credentials as imp

        return imp.Credentials.from_impersonated_service_account_info(info, scopes=SCOPES), None
    if kind == "external_account_authorized_user":
        from google.auth import external_account_authorized_user as eaau

        return eaau.Credentials.from_info(info), None
    # external_account: AWS, an executable (which google.auth itself runs only where
    # GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1), or else a file or URL token (identity pool)
    from google.auth import aws, identity_pool, pluggable

    source = info.get("credential_source")
    if info.get("subject_token_type") == AWS_SUBJECT_TOKEN:
        loader = aws.Credentials
    elif isinstance(source, dict) and source.get("executable") is not None:
        loader = pluggable.Credentials
    else:
        loader = identity_pool.Credentials
    return loader.from_info(info, scopes=SCOPES), None


def _flaw(exc: BaseException, kind: str = "service_account") -> str:
    """What is wrong inside a key, as " (…)" for a sentence, or "" when its type alone says it.

    google's own errors (MalformedError, InvalidValue) name the missing or wrong fields; a KeyError is
    a required field absent; any other ValueError of a service-account key is cryptography refusing
    the private key (its text a link to a FAQ), of another type google's own words."""
    from google.auth.exceptions import GoogleAuthError

    google_words = isinstance(exc, GoogleAuthError) or (type(exc) is ValueError and kind != "service_account")
    if google_words and len(exc.args) == 1:
        detail = (str(exc.args[0]).strip().splitlines() or [""])[0].rstrip(".")
        return f" ({detail[:1].lower()}{detail[1:]})" if detail else ""
    if isinstance(exc, KeyError):
        return f" (it has no {exc.args[0]} field)"
    if isinstance(exc, ValueError):
        return " (its private_key is not a PEM private key)"
    return ""  # a field of the wrong JSON type: the sentence says it


def resolve_config(settings: Settings) -> ClientConfig:
    """Credentials and the billing project; GCP_PROJECT wins over the key's own project."""
    credentials, key_project = build_credentials(settings)
    project = settings.gcp_project or key_project
    if not project:
        raise ConfigError(
            "GCP_PROJECT is not set: name the Google Cloud project that runs (and pays for) queries."
        )
    return ClientConfig(
        project=project,
        credentials=credentials,
        location=settings.bigquery_location,
        api_url=settings.bigquery_api_url,
    )


def build_client(config: ClientConfig):
    """A `google.cloud.bigquery.Client` for the billing project (REST endpoint overridable)."""
    from google.cloud import bigquery

    options = {"api_endpoint": config.api_url.rstrip("/")} if config.api_url else None
    return bigquery.Client(
        project=config.project,
        credentials=config.credentials,
        location=config.location,
        client_options=options,
    )


def bounded(seconds: float, *, job: bool = False):
    """google's retry policy (of API calls; `job`: of whole query jobs), giving up after `seconds` in
    all: its defaults keep retrying for 600 s, so an unreachable BigQuery (DNS failing, a firewall)
    held a step far past its time limit, and its turn with it."""
    from google.cloud.bigquery.retry import DEFAULT_JOB_RETRY, DEFAULT_RETRY

    return (DEFAULT_JOB_RETRY if job else DEFAULT_RETRY).with_timeout(max(seconds, 0.1))


DRY_RUN_S = 20.0  # a dry run answers in well under a second; one that does not, BigQuery is not there
ANSWER_GRACE_S = 5.0  # past its own limits, a call still running is dripping: given up
LISTING_S = 120.0  # a whole listing (many metadata calls) or a result's download (up to 5 M rows)


class NoAnswer(TimeoutError):
    """A call still running past its own limits (`off_loop`'s deadline): BigQuery's address answers a
    byte at a time, or not at all, and google's per-read timeout never fires."""

    def __init__(self, seconds: float):
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


async def off_loop(call: Callable[..., T], *args: Any, deadline_s: float | None = None, **kwargs: Any) -> T:
    """Run a blocking client call in a daemon thread of its own and await it (core/daemon_thread.py: a
    Ctrl-C'd `ask` waited out a call still retrying), given up after `deadline_s` (NoAnswer)."""
    run = functools.partial(call, *args, **kwargs)
    if deadline_s is None:
        return await in_daemon_thread(run, name="bigquery")
    try:
        return await within(run, deadline_s, name="bigquery")
    except CallDeadline:
        raise NoAnswer(deadline_s) from None
