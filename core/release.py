"""Which release is running: the package version plus the git commit it was built from.

`datathread --version` said `datathread 0.1.0` for releases 880 commits apart, and neither `/healthz`
nor `doctor` named one: in a fleet of replicas upgraded one at a time nobody could tell which ran what.
The commit is read from the checkout's `.git` at run time, without running git (a few small reads:
HEAD, then the branch's ref file or packed-refs; a worktree's `.git` file names its git directory).
Where the code runs without its checkout — the Modal image holds only the sources — the deploy sets
DATATHREAD_RELEASE from the deployer's checkout (deploy/modal_app.py), and that is reported instead.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout (or the installed tree) holding core/
SHORT = 12  # hex digits of a commit shown: unique in any repository of this size
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def package_version() -> str:
    """The installed package's version; "unknown" when it is not installed (sources alone, as on Modal)."""
    try:
        return version("datathread")
    except PackageNotFoundError:
        return "unknown"


def checkout_commit(root: Path = ROOT) -> str:
    """The commit checked out at `root` (its first SHORT hex digits), or "" when there is no readable
    git checkout there."""
    try:
        git_dir = _git_dir(root / ".git")
        head = (git_dir / "HEAD").read_text().strip()
        sha = _resolve(git_dir, head.removeprefix("ref:").strip()) if head.startswith("ref:") else head
    except (OSError, ValueError, UnicodeDecodeError):
        return ""
    return sha[:SHORT] if _SHA.fullmatch(sha) else ""


def release_id(configured: str = "", root: Path = ROOT) -> str:
    """The release as one token, e.g. `0.1.0+b8187ef1a2b3` (a PEP 440 local version): `configured`
    (DATATHREAD_RELEASE) when set, else the package version plus the checkout's commit when known."""
    if configured:
        return configured
    commit = checkout_commit(root)
    return f"{package_version()}+{commit}" if commit else package_version()


def _git_dir(dot_git: Path) -> Path:
    """`.git` itself, or the directory a worktree's (or submodule's) `.git` file points to."""
    if dot_git.is_dir():
        return dot_git
    text = dot_git.read_text().strip()
    if not text.startswith("gitdir:"):
        raise ValueError("not a git file")
    target = Path(text.removeprefix("gitdir:").strip())
    return target if target.is_absolute() else (dot_git.parent / target).resolve()


def _resolve(git_dir: Path, ref: str) -> str:
    """A ref's commit: its loose file (in the worktree's git directory, then the shared one), else its
    line in packed-refs."""
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for base in (git_dir, common):
        if (base / ref).is_file():
            return (base / ref).read_text().strip()
    for line in (common / "packed-refs").read_text().splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref:
            return sha
    return ""
