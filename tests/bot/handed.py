"""What a surface hands the core for a turn, as the turn gets it: a spy around `Analyst.handle` that
keeps each message, with the files the core fetched through the surface's `fetch_files` put on it once
the core has called it (core/file_fetch.py). A message whose fetch was never called (a person the
rules refuse) keeps no files. The real core still answers every message."""

from __future__ import annotations

from dataclasses import replace

from core.events import IncomingMessage


def spy_on_handle(analyst, seen: list[IncomingMessage]):
    """A stand-in for `analyst.handle` that appends to `seen`; set it as the analyst's `handle`."""
    handle = analyst.handle

    async def spy(message, sink, **kwargs):
        index = len(seen)
        seen.append(message)
        fetch = kwargs.get("fetch_files")
        if fetch is not None:

            async def fetched():
                files = await fetch()
                seen[index] = replace(message, files=files)
                return files

            kwargs["fetch_files"] = fetched
        return await handle(message, sink, **kwargs)

    return spy
