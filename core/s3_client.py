"""The one way datathread builds an S3 client (botocore's, as boto3 would), with bounds: the data
sources' (`core/s3.py`), the files bucket's links (`bot/files.py`) and `doctor`'s check.

Why one place: botocore's defaults are a 60 s read and several tries, and each caller set its own — or
none: the files bucket's client kept the defaults after the data sources' client was bounded, so a
Teams file link against an S3 endpoint that never answered held its delivery for minutes. Callers
still give each call a deadline of its own (`core/daemon_thread.py`'s `within`): a server that drips
its answer never trips a per-read timeout.
"""

from __future__ import annotations

import functools
from typing import Any

from core.config import Settings
from core.wording import os_reason

CONNECT_TIMEOUT_S, READ_TIMEOUT_S = 5.0, 20.0  # per connection and per read
# Two tries in all: the first and one retry. botocore's `max_attempts` counts retries, not tries (it
# becomes total_max_attempts = max_attempts + 1), so {"max_attempts": 2} made three tries of 20 s, 61 s
# against an endpoint that never answers; `total_max_attempts` counts the first request too. The mode is
# fixed, so AWS_RETRY_MODE=adaptive cannot add client-side waits before a try.
TRIES = 2
DEADLINE_S = 120.0  # one whole call (a listing, a download of up to DATATHREAD_S3_MAX_FILE_MB, an upload)


def s3_client(settings: Settings, *, timeout_s: float | None = None, tries: int | None = None) -> Any:
    """An S3 client for the configured endpoint and region: connect and read timeouts of
    CONNECT_TIMEOUT_S and READ_TIMEOUT_S (both `timeout_s` when given), `tries` in all (TRIES)."""
    import botocore.session
    from botocore.config import Config

    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S if timeout_s is None else timeout_s,
        read_timeout=READ_TIMEOUT_S if timeout_s is None else timeout_s,
        retries={"total_max_attempts": tries or TRIES, "mode": "standard"},
    )
    # botocore's own session (what boto3's wraps; boto3's would append a search path to the shared
    # loader each time), one a client: sessions are not thread-safe, clients are
    session = botocore.session.Session()
    session.register_component("data_loader", _service_models())
    endpoint = str(settings.s3_endpoint_url) if settings.s3_endpoint_url else None
    return session.create_client("s3", endpoint_url=endpoint, region_name=settings.aws_region, config=config)


@functools.cache
def _service_models() -> Any:
    """botocore's loader of service models, shared by every client: a new session read and parsed S3's
    model again, 160–380 ms of CPU a client (the files bucket makes one per file it links), 40 ms with
    the loader shared — and `doctor`'s S3 check reached its endpoint 3 s after the others on a busy host.
    The loader only reads the models shipped with botocore and caches them (safe across threads)."""
    import botocore.loaders

    return botocore.loaders.create_loader()


def s3_reason(exc: Exception) -> str:
    """What went wrong, without botocore's class names and URLs (a presigned one carries a token)."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'error')} ({error.get('Message', '').rstrip('.') or 'no message'})"
    if isinstance(exc, ReadTimeoutError | ConnectTimeoutError):
        return "it did not answer in time"
    if isinstance(exc, EndpointConnectionError):
        return os_reason(exc) or "it could not be reached"
    return os_reason(exc) or type(exc).__name__
