"""The release is the package version plus the commit of the checkout (core/release.py): `--version`
said `datathread 0.1.0` for releases 880 commits apart. Read from `.git` without running git, in each
shape a checkout takes: a branch's loose ref, a packed ref, a detached HEAD, a worktree's `.git` file."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.release import checkout_commit, package_version, release_id

SHA = "0be3b5c09ba444901b97c4f218ed537c80b97e43"


def loose(root: Path) -> None:
    (root / ".git/refs/heads").mkdir(parents=True)
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git/refs/heads/main").write_text(SHA + "\n")


def packed(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git/packed-refs").write_text(
        f"# pack-refs with: peeled\n{'1' * 40} refs/heads/other\n{SHA} refs/heads/main\n"
    )


def detached(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text(SHA + "\n")


def worktree(root: Path) -> None:
    """`git worktree add`: `.git` is a file naming a folder under the main checkout's git directory,
    whose `commondir` leads back to the refs they share."""
    main = root / "main/.git"
    (main / "worktrees/wt").mkdir(parents=True)
    (main / "packed-refs").write_text(f"{SHA} refs/heads/feature\n")
    (main / "worktrees/wt/HEAD").write_text("ref: refs/heads/feature\n")
    (main / "worktrees/wt/commondir").write_text("../..\n")
    (root / ".git").write_text(f"gitdir: {main / 'worktrees/wt'}\n")


def no_checkout(root: Path) -> None:
    """An installed copy, or the Modal image: sources without `.git`."""


def broken(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git/HEAD").write_text("ref: refs/heads/gone\n")


@pytest.mark.parametrize(
    ("shape", "commit"),
    [
        (loose, SHA[:12]),
        (packed, SHA[:12]),
        (detached, SHA[:12]),
        (worktree, SHA[:12]),
        (no_checkout, ""),
        (broken, ""),
    ],
)
def test_the_commit_is_read_from_each_shape_of_checkout(tmp_path, shape, commit):
    shape(tmp_path)
    assert checkout_commit(tmp_path) == commit
    expected = f"{package_version()}+{commit}" if commit else package_version()
    assert release_id(root=tmp_path) == expected


def test_a_release_set_at_deploy_time_is_the_one_named(tmp_path):
    loose(tmp_path)
    assert release_id("0.1.0+abcdef123456", root=tmp_path) == "0.1.0+abcdef123456"
