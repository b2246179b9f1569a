"""Charts in the terminal: inline where the terminal can draw images, otherwise a path the user can open.

Inline images use the kitty graphics protocol (kitty, Ghostty, WezTerm with kitty support) or iTerm2's
inline-image escape (iTerm2, WezTerm, VS Code's terminal), chosen from TERM / TERM_PROGRAM; anything
else gets the path only. https://sw.kovidgoyal.net/kitty/graphics-protocol/ ,
https://iterm2.com/documentation-images.html

Attached files are copied out of the sandbox's workspace into DATATHREAD_HOME/attachments/<session>/,
readable by the person who ran the command (under sudo: owned by SUDO_UID), because the workspace
itself is private to the sandbox.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

Protocol_ = Literal["kitty", "iterm2"]
KITTY_CHUNK = 4096


def image_protocol(env: Mapping[str, str]) -> Protocol_ | None:
    """Which inline-image escape this terminal understands, from its environment (None: none known)."""
    term, program = env.get("TERM", ""), env.get("TERM_PROGRAM", "")
    if "kitty" in term or env.get("KITTY_WINDOW_ID") or program in ("ghostty",):
        return "kitty"
    if program in ("iTerm.app", "WezTerm", "vscode") or env.get("LC_TERMINAL") == "iTerm2":
        return "iterm2"
    return None


def inline_image(png: bytes, protocol: Protocol_, *, name: str = "chart.png") -> str:
    """The escape sequence that draws `png` at the cursor (followed by a newline)."""
    data = base64.standard_b64encode(png).decode()
    if protocol == "iterm2":
        label = base64.standard_b64encode(name.encode()).decode()
        return f"\x1b]1337;File=name={label};size={len(png)};inline=1;preserveAspectRatio=1:{data}\x07\n"
    chunks = [data[i : i + KITTY_CHUNK] for i in range(0, len(data), KITTY_CHUNK)] or [""]
    out = []
    for n, chunk in enumerate(chunks):
        more = 1 if n < len(chunks) - 1 else 0
        head = f"a=T,f=100,m={more}" if n == 0 else f"m={more}"
        out.append(f"\x1b_G{head};{chunk}\x1b\\")
    return "".join(out) + "\n"


def save_for_user(data: bytes, home: Path, session_id: str, name: str, env: Mapping[str, str]) -> Path:
    """Write an attachment where the invoking user, and only they, can open it; returns its path.
    Owner-only (folders 0700, files 0600): query results can hold anything the warehouse does, and the
    state home around them is 0711 — at 0755/0644 every user of the host could list the sessions and
    read each CSV. Under sudo they belong to the person behind it."""
    folder = home.resolve() / "attachments" / session_id
    folder.mkdir(parents=True, exist_ok=True)
    target = _place(data, folder, Path(name).name)
    owner = _sudo_owner(env)
    for path, mode in ((home.resolve() / "attachments", 0o700), (folder, 0o700), (target, 0o600)):
        os.chmod(path, mode)
        if owner is not None:
            with contextlib.suppress(OSError):
                os.chown(path, *owner)
    return target


def _place(data: bytes, folder: Path, name: str) -> Path:
    """Write `data` as `name` in `folder`, or as `stem-2.ext`, `stem-3.ext`… when a different file has
    that name: a later answer attaching `top3.csv` again replaced the earlier one, so a path printed
    under an earlier answer silently held other data. The same bytes again keep the earlier path.
    Each name is claimed with O_EXCL: two `ask`s of one session at once cannot take the same one."""
    first = Path(name)
    for n in range(1, 10_000):
        target = folder / (name if n == 1 else f"{first.stem}-{n}{first.suffix}")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if target.stat().st_size == len(data) and target.read_bytes() == data:
                    return target
            continue
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        except BaseException:
            target.unlink(missing_ok=True)  # no half-written file under a name a later answer would skip
            raise
        return target
    raise FileExistsError(f"{folder} holds too many files named like {name}")


def _sudo_owner(env: Mapping[str, str]) -> tuple[int, int] | None:
    """The account behind `sudo`, when we run as root for it."""
    if os.geteuid() != 0 or not env.get("SUDO_UID", "").isdigit():
        return None
    return int(env["SUDO_UID"]), int(env.get("SUDO_GID", env["SUDO_UID"]) or 0)
