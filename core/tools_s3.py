"""The S3 tools, offered only when DATATHREAD_S3_BUCKETS is set: `list_files` and `load_file`.

`load_file` downloads with the bot's credentials, writes the bytes into the session workspace via
`Sandbox.write_file`, and describes the file from inside the sandbox (so parsing an untrusted file
never happens in the bot process). The model then uses `run_sql`/`run_python` on it by name.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import Field

from core.file_describe import converted_name, describe_file
from core.file_stems import safe_file_stem
from core.s3 import S3Refusal, parse_uri
from core.sandbox import WorkspaceFull
from core.shared_files import READABLE as LOADABLE
from core.shared_names import renamed_note, unshared_stem
from core.tool_outcome import ToolOutcome, refused
from core.tools import Tool, ToolContext, ToolInput


class ListFilesInput(ToolInput):
    """List data files in the S3 buckets you may read (CSV, Parquet, JSON, Excel), with sizes.
    Then load_file one of them into the workspace."""

    prefix: str | None = Field(None, description="Optional s3://bucket/prefix to narrow the listing.")


class LoadFileInput(ToolInput):
    """Copy one S3 file (CSV, TSV, Parquet, JSON/JSONL, Excel .xlsx) into the workspace, then query it
    with run_sql (SELECT * FROM 'name.csv') or run_python. You get its row count, columns and first rows."""

    uri: str = Field(description="The file, e.g. s3://bucket/path/sales.csv (as list_files shows it).")
    save_as: str | None = Field(None, description="File stem in the workspace; default: the S3 file's stem.")


async def list_files(args: ListFilesInput, ctx: ToolContext) -> ToolOutcome:
    """Let the model discover S3 files without loading them."""
    if ctx.s3 is None:
        return refused("S3 is not configured here.")
    try:
        objects, note = await ctx.s3.list(args.prefix, limit=201), ""
    except S3Refusal as exc:
        if not exc.listed:
            return refused(str(exc))
        objects, note = exc.listed, str(exc)  # some places answered: theirs, and which did not
    if not objects:
        return ToolOutcome(
            content=f"No files found under {args.prefix or ctx.s3.where()}.", summary="0 files"
        )
    lines = [f"- {o.uri} ({o.size:,} bytes)" for o in objects[:200]]
    if len(objects) > 200:
        lines.append("(More files exist; pass a narrower prefix.)")
    summary = f"{min(len(objects), 200)} files" + (", some places did not answer" if note else "")
    return ToolOutcome(content="\n".join([*lines, *([note] if note else [])]), summary=summary)


async def load_file(args: LoadFileInput, ctx: ToolContext) -> ToolOutcome:
    """Bring one allowed S3 file into the session workspace and describe it."""
    if ctx.s3 is None:
        return refused("S3 is not configured here.")
    source = PurePosixPath(args.uri.split("?")[0])
    ext = source.suffix.lstrip(".").lower()
    if ext not in LOADABLE:
        return refused(f"I can load {', '.join(LOADABLE)} files; '{args.uri}' is not one of them.")
    try:
        ctx.s3.check(*parse_uri(args.uri))
        key, data = await ctx.s3.fetch(args.uri)
    except S3Refusal as exc:
        return refused(str(exc))
    stem = safe_file_stem(args.save_as, default=safe_file_stem(PurePosixPath(key).stem, "s3_file"))
    kinds = _kinds(ext)
    kept = unshared_stem(stem, ctx.query.shared, kinds=kinds)
    held = {shared.lower() for shared in ctx.query.shared}
    clash = next((kind for kind in kinds if f"{stem}.{kind}".lower() in held), ext)
    name = f"{kept}.{ext}"
    try:
        await ctx.sandbox.write_file(ctx.session_id, name, data)
    except WorkspaceFull as exc:
        return refused(str(exc))
    described = await describe_file(
        ctx.sandbox, ctx.step_request("python"), name, ext
    )  # in the sandbox, not the bot
    if described.excel_failed:
        return refused(f"Could not read {name} as Excel: {described.unread_line}")
    name = described.name  # a workbook is queried as the Parquet file it became, a CSV as its UTF-8 copy
    head = f"Loaded s3://{parse_uri(args.uri)[0]}/{key} ({len(data):,} bytes) as '{name}'."
    if kept != stem:  # the name it got, and whose file it keeps clear of
        head += f" {renamed_note(f'{stem}.{clash}', name, ctx.query.shared)}"
    if not described.ok:
        return ToolOutcome(
            content=f"{head} It could not be parsed as {ext}: {described.unread_line}",
            is_error=True,
            summary=f"loaded {name}, unreadable",
            files=(name,),
        )
    return ToolOutcome(
        content=f"{head} Query it with run_sql, e.g. SELECT * FROM {described.query_from}.\n{described.text}",
        summary=f"loaded {name} ({len(data):,} bytes)",
        files=(name,),
    )


def _kinds(ext: str) -> tuple[str, ...]:
    """The endings of the files a loaded object of kind `ext` may take in the workspace: itself, and
    what it is read through — a workbook's Parquet file, a CSV's UTF-8 copy (`converted_name`, the
    names the intake keeps clear of too). None may be a file a person shared: the copy of a
    Windows-1252 `prices.csv` from S3 was written over a shared `prices.utf8.csv`."""
    converted = converted_name(f"x.{ext}", ext)
    return (ext, converted.removeprefix("x.")) if converted else (ext,)


S3_TOOLS: tuple[Tool, ...] = (
    Tool("list_files", ListFilesInput, list_files, "Listing S3 files"),
    Tool("load_file", LoadFileInput, load_file, "Loading a file from S3"),
)
