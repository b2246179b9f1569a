"""What a step does to its workspace lands there, whatever the back end: on `root` and `userns` the step
writes into a size-limited layer the supervisor lands afterwards (`core/workspace_overlay.py`), so
deletions, renames, overwrites, type changes and modes must come through it exactly, nothing the step
planted may make the landing write outside the workspace, and the workspace stays exactly within its
quota. Checked from the host, with a real fork server per back end."""

from __future__ import annotations

import os
import resource
import stat
import uuid

import pytest
import pytest_asyncio

from core import isolation_root
from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from tests.core.sandbox_backends import BACKENDS, start_sandbox

module_loop = pytest.mark.asyncio(loop_scope="module")
HARD = ("root", "userns")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandbox(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("overlay") / "home"
    sb = await start_sandbox(request.param, workspaces=home / "workspaces", hidden=[home])
    yield sb
    await sb.close()


def session() -> str:
    return f"ov-{uuid.uuid4().hex[:10]}"


async def step(sb: LocalSandbox, sid: str, code: str, *, timeout_s: float = 20):
    return await sb.run(StepRequest(kind="python", session_id=sid, code=code, timeout_s=timeout_s))


def usage(root) -> tuple[int, int]:
    """Bytes (apparent sizes of everything but directories) and entries under `root`, from the host."""
    paths = list(root.rglob("*"))
    return sum(p.lstat().st_size for p in paths if not p.is_dir() or p.is_symlink()), len(paths)


@module_loop
async def test_deletes_renames_overwrites_and_modes_land(sandbox):
    sid = session()
    ws = sandbox.workspace(sid)
    setup = (
        "import os\nos.makedirs('keep'); os.makedirs('gone/deep')\n"
        "for name, text in {'a.csv': 'x,y\\n1,2\\n', 'old.txt': 'old', 'keep/k.txt': 'k', 'gone/1': '1',"
        " 'gone/deep/2': '2'}.items():\n    open(name, 'w').write(text)"
    )
    assert (await step(sandbox, sid, setup)).ok
    code = (
        "import os, shutil\n"
        "open('a.csv', 'w').write('x,y\\n3,4\\n')\n"  # overwrite
        "os.remove('old.txt')\n"
        "os.rename('keep/k.txt', 'keep/k2.txt')\n"
        "shutil.rmtree('gone')\n"
        "os.makedirs('new/deep')\n"
        "open('new/deep/n.bin', 'wb').write(bytes(range(256)) * 40)\n"
        "os.chmod('new/deep/n.bin', 0o640)\n"
        "os.symlink('a.csv', 'link')\n"
        "print(sorted(os.listdir('.')))\n"
    )
    result = await step(sandbox, sid, code)
    assert result.ok, result
    assert (ws / "a.csv").read_bytes() == b"x,y\n3,4\n"
    assert not (ws / "old.txt").exists() and not (ws / "gone").exists()
    assert not (ws / "keep" / "k.txt").exists() and (ws / "keep" / "k2.txt").read_bytes() == b"k"
    landed = ws / "new" / "deep" / "n.bin"
    assert landed.read_bytes() == bytes(range(256)) * 40
    assert stat.S_IMODE(landed.stat().st_mode) == 0o640
    assert os.readlink(ws / "link") == "a.csv"
    if sandbox.backend == "root":  # every landed entry belongs to the session's uid, not the supervisor's
        owner = ws.stat().st_uid
        assert {p.lstat().st_uid for p in ws.rglob("*")} == {owner}, "landed as another uid"
    # the next step and the bot's own reads see exactly that
    again = await step(
        sandbox, sid, "import os\nprint(sorted(os.listdir('.')), open('new/deep/n.bin','rb').read()[:3])"
    )
    assert again.ok and again.output.startswith(result.output.strip()), (again, result)
    assert await sandbox.read_file(sid, "new/deep/n.bin") == bytes(range(256)) * 40


@module_loop
async def test_type_changes_and_replaced_directories_land(sandbox):
    sid = session()
    ws = sandbox.workspace(sid)
    made = "import os\nos.mkdir('d')\nfor name in ('d/old1', 'd/old2', 'f'):\n    open(name, 'w').write(name)"
    assert (await step(sandbox, sid, made)).ok
    code = (
        "import os, shutil\n"
        "shutil.rmtree('d'); os.mkdir('d'); open('d/new', 'w').write('n')\n"  # an opaque directory
        "os.remove('f'); os.mkdir('f'); open('f/inside', 'w').write('i')\n"  # a file becomes a directory
        "os.mkdir('g'); os.rmdir('g'); open('g', 'w').write('g')\n"
    )
    result = await step(sandbox, sid, code)
    assert result.ok, result
    assert sorted(p.name for p in (ws / "d").iterdir()) == ["new"]
    assert (ws / "f" / "inside").read_text() == "i" and (ws / "g").read_text() == "g"
    result = await step(sandbox, sid, "import os, shutil\nshutil.rmtree('f'); open('f', 'w').write('back')")
    assert result.ok and (ws / "f").read_text() == "back", result


@module_loop
async def test_links_planted_in_the_workspace_or_the_layer_never_lead_the_landing_outside(sandbox, tmp_path):
    if sandbox.backend not in HARD:
        return  # no landing there: the step writes the workspace itself (Landlock or nothing confines it)
    sid = session()
    ws = sandbox.workspace(sid)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("untouched")
    os.chmod(outside, 0o777)
    os.chmod(victim, 0o666)  # writable by the step, were it the same file
    # planted from the host as a step of another back end could have: a directory link, a file link,
    # a hard link to a file outside (same filesystem)
    (ws / "dirlink").symlink_to(outside)
    (ws / "filelink").symlink_to(victim)
    os.link(victim, ws / "hard")
    code = (
        "import os\n"
        "os.remove('dirlink'); os.mkdir('dirlink'); open('dirlink/victim.txt', 'w').write('PWNED-dir')\n"
        "os.remove('filelink'); open('filelink', 'w').write('PWNED-file')\n"
        "open('hard', 'w').write('PWNED-hard')\n"  # the layer gets a copy; the landing must not write through
        "open('a', 'w').write('same'); os.link('a', 'b')\n"  # a hard link inside the layer
        f"os.symlink({str(outside)!r}, 'escape'); os.symlink('/etc/passwd', 'passwd')\n"
        "os.mkfifo('pipe')\n"
    )
    result = await step(sandbox, sid, code)
    assert result.ok, result
    assert victim.read_text() == "untouched" and sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (ws / "dirlink").is_dir() and not (ws / "dirlink").is_symlink()
    assert (ws / "dirlink" / "victim.txt").read_text() == "PWNED-dir"
    assert not (ws / "filelink").is_symlink() and (ws / "filelink").read_text() == "PWNED-file"
    assert (ws / "hard").read_text() == "PWNED-hard" and (ws / "hard").stat().st_nlink == 1
    assert (ws / "a").read_text() == (ws / "b").read_text() == "same"
    assert os.readlink(ws / "escape") == str(outside)  # a link lands as a link, never followed
    assert not (ws / "pipe").exists()  # pipes, sockets and devices do not land


@module_loop
async def test_a_burst_of_files_stops_exactly_at_the_quota(sandbox):
    """Many files in well under one watchdog tick: on root/userns not one byte or entry past the quota."""
    sid = session()
    ws = sandbox.workspace(sid)
    await sandbox.write_file(sid, "seed.csv", b"a\n1\n")
    before_bytes, before_files = usage(ws)
    saved = sandbox.workspace_bytes, sandbox.workspace_files
    sandbox.workspace_bytes, sandbox.workspace_files = before_bytes + 3 * 2**20 + 123, before_files + 300
    code = (
        "import os\n"
        "for i in range(40):\n"
        "    open(f'f{i}', 'wb').write(os.urandom(100_000 + i))\n"  # 4 MB at disk speed, not page aligned
        "for i in range(2000):\n"
        "    open(f'e{i}', 'w').close()\n"
    )
    try:
        result = await step(sandbox, sid, code)
    finally:
        quota_bytes, quota_files = sandbox.workspace_bytes, sandbox.workspace_files
        sandbox.workspace_bytes, sandbox.workspace_files = saved
    used_bytes, used_files = usage(ws)
    if sandbox.backend not in HARD:
        # A watchdog (landlock, none) stops the step at its next 0.1 s tick; a step quicker than a tick
        # (4 MB in 65 ms as an ordinary user on a fast machine) is caught by the check after it
        # (core/sandbox_quota.py, after_step), in its own words. Either way it failed for its quota.
        caught = ("filled the thread's workspace past its limit", "over its 3 MB limit")
        assert not result.ok and any(words in result.error for words in caught), result
        return
    assert not result.ok and "filled the thread's workspace past its limit" in result.error, result
    assert used_bytes <= quota_bytes and used_files <= quota_files, (used_bytes, used_files)
    # the message says what the step had and what to do
    assert (
        "could add at most 3.0 MB" in result.error and f"{quota_files - before_files:,} files" in result.error
    )
    assert "Delete files you no longer need" in result.error
    # and the room it had was used, not refused early
    assert used_bytes > quota_bytes - 200_000 or used_files == quota_files, (used_bytes, used_files)


@module_loop
async def test_a_full_workspace_can_still_be_emptied(sandbox):
    """Deleting costs the layer an entry per file (a whiteout): a workspace at its file quota must still
    be able to delete everything, and the room comes back for the next step."""
    sid = session()
    ws = sandbox.workspace(sid)
    saved = sandbox.workspace_bytes, sandbox.workspace_files
    base = usage(ws)[1]
    sandbox.workspace_files = base + 500
    try:
        filled = await step(
            sandbox, sid, "import os\nos.mkdir('many')\nfor i in range(499): open(f'many/{i}', 'w').close()"
        )
        assert filled.ok and usage(ws)[1] == base + 500, (filled, usage(ws))
        emptied = await step(sandbox, sid, "import shutil\nshutil.rmtree('many')\nprint('gone')")
        assert emptied.ok and emptied.output == "gone\n", emptied
        assert usage(ws)[1] == base
        refill = await step(
            sandbox, sid, "import os\nos.mkdir('again')\nfor i in range(499): open(f'again/{i}', 'w').close()"
        )
        assert refill.ok and usage(ws)[1] == base + 500, refill
    finally:
        sandbox.workspace_bytes, sandbox.workspace_files = saved


@module_loop
async def test_a_step_stopped_at_its_time_limit_or_failing_keeps_what_it_wrote(sandbox):
    """Decided: what a step wrote before it failed or was stopped stays (as it always has with the
    workspace written directly), within the quota."""
    sid = session()
    ws = sandbox.workspace(sid)
    slow = "open('before.txt', 'w').write('kept')\nimport time\ntime.sleep(60)"
    # 4 s: the limit counts from when the bot was told the step's pid, set-up included (measuring the
    # workspace, mounting its layer); at 2 s a loaded machine (`make test` as an ordinary user, 3 workers
    # on 2 cores) once stopped the userns step before its first line had written anything
    for limit in (4, 20):  # and CI's ordinary-user pass once took the first 4 s before that line ran
        result = await step(sandbox, sid, slow, timeout_s=limit)
        if (ws / "before.txt").exists():
            break
    assert not result.ok and "step time limit" in result.error, result
    assert (ws / "before.txt").read_text() == "kept"
    result = await step(sandbox, sid, "open('partial.txt', 'w').write('p')\nraise ValueError('boom')")
    assert not result.ok and "boom" in result.error
    assert (ws / "partial.txt").read_text() == "p"


DEEP = (
    "import os\nfor i in range(20):\n    name = f'{i:02d}' + 'd' * 238\n"
    "    os.makedirs(name, exist_ok=True)\n    os.chdir(name)\n"
    "open(f'big{STEP}.bin', 'wb').write(os.urandom(3 * 2 ** 20))\n"
)


def usage_by_descriptors(root) -> tuple[int, int]:
    """`usage`, but walking by directory descriptors: no path length limits it (a tree deeper than
    PATH_MAX is counted in full, or this fails loudly)."""
    total = files = 0
    pending = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    while pending:
        fd = pending.pop()
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    files += 1
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd))
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
        finally:
            os.close(fd)
    return total, files


@module_loop
async def test_a_tree_deeper_than_path_max_counts_against_the_quota(sandbox):
    """20 directories of 240-character names (~4.8 KB of path, past PATH_MAX) holding a 3 MB file, step
    after step in a 4 MB quota: the workspace never holds more than the quota, and the model is told."""
    sid = session()
    ws = sandbox.workspace(sid)
    saved = sandbox.workspace_bytes
    sandbox.workspace_bytes = 4 * 2**20
    try:
        results = [await step(sandbox, sid, DEEP.replace("STEP", str(n))) for n in range(4)]
        used, _ = usage_by_descriptors(ws)
    finally:
        sandbox.workspace_bytes = saved
    assert results[0].ok, results[0]
    assert used <= 4 * 2**20, used
    for result in results[1:]:
        assert not result.ok and "filled the thread's workspace past its limit" in result.error, result


RENAME_AND_STALL = (
    "import os, time\nos.rename('data.csv', 'renamed.csv')\n"
    "for i in range(10):\n    with open(f'sparse{i}.bin', 'wb') as f:\n"
    "        f.seek(100 * 2 ** 20 - 1)\n        f.write(b'x')\n"
    "open('reached-the-sleep', 'w').close()\n"
    "time.sleep(60)\n"
)


@module_loop
async def test_a_rename_stopped_at_the_time_limit_loses_nothing(sandbox):
    """A step renames a 20 MB file, writes ten 100 MB sparse files and sleeps past its limit: the
    file survives whole under one of its names, no partial or temporary file is left, everything
    belongs to the workspace's owner, and the sparse files land as sparse as the step wrote them."""
    sid = session()
    ws = sandbox.workspace(sid)
    make = "import os, random\nrandom.seed(7)\nopen('data.csv', 'wb').write(random.randbytes(20 * 2 ** 20))"
    assert (await step(sandbox, sid, make)).ok
    content = (ws / "data.csv").read_bytes()
    saved = sandbox.workspace_bytes
    sandbox.workspace_bytes = 2 * 2**30
    try:
        for limit in (3, 20):  # a loaded machine (CI) can take the first 3 s before the step's code runs
            result = await step(sandbox, sid, RENAME_AND_STALL, timeout_s=limit)
            if (ws / "reached-the-sleep").exists():
                break
    finally:
        sandbox.workspace_bytes = saved
    assert not result.ok and "step time limit" in result.error, result
    assert (ws / "reached-the-sleep").exists(), sorted(p.name for p in ws.iterdir())
    kept = [p for p in (ws / "data.csv", ws / "renamed.csv") if p.exists()]
    assert len(kept) == 1 and kept[0].read_bytes() == content, kept
    owner = ws.stat().st_uid
    for path in ws.rglob("*"):
        assert not path.name.startswith(".landing-"), path
        assert path.lstat().st_uid == owner, (path, path.lstat().st_uid, owner)
    if sandbox.backend in HARD:  # landed through the layer: the new name, holes kept
        assert kept[0].name == "renamed.csv"
        for i in range(10):
            landed = (ws / f"sparse{i}.bin").stat()
            assert landed.st_size == 100 * 2**20 and landed.st_blocks * 512 < 2**20, landed


@module_loop
async def test_changing_a_file_larger_than_the_room_left_says_so(sandbox):
    """A 40 MB file in a 64 MB quota: appending to it or chmod-ing it needs a whole copy in the layer
    (hard quota), which does not fit; the model is told that, and what to do, not that it "filled" the
    workspace. The file is unchanged. Where the quota is a watchdog the append simply works."""
    sid = session()
    ws = sandbox.workspace(sid)
    saved = sandbox.workspace_bytes
    sandbox.workspace_bytes = 64 * 2**20
    try:
        assert (await step(sandbox, sid, "open('big.csv', 'wb').write(b'x' * 40 * 2 ** 20)")).ok
        results = [
            await step(sandbox, sid, "open('big.csv', 'ab').write(b'y')"),
            await step(sandbox, sid, "import os\nos.chmod('big.csv', 0o600)"),
        ]
    finally:
        sandbox.workspace_bytes = saved
    if not sandbox.protections()["workspace quota"].startswith("on — hard"):
        assert results[0].ok, results[0]
        return
    for result in results:
        assert not result.ok and "changing an existing file" in result.error, result
        assert "Write a new file instead" in result.error, result
    assert (ws / "big.csv").stat().st_size == 40 * 2**20


NEST = (
    "import os\nfor _ in range(1100):\n    os.mkdir('n')\n    os.chdir('n')\nopen('leaf', 'w').write('x')\n"
)
UNNEST = (
    "import os\nfor _ in range(1100):\n    os.chdir('n')\nos.remove('leaf')\n"
    "for _ in range(1100):\n    os.chdir('..')\n    os.rmdir('n')\n"
)


@module_loop
async def test_a_tree_1100_levels_deep_lands_and_can_be_deleted(sandbox):
    """Past Python's recursion limit and a default 1,024 open files: the landing neither recurses nor
    runs out of descriptors; a tree too deep to measure counts as over the quota, so the next step may
    only shrink the workspace — and deleting it lands."""
    sid = session()
    ws = sandbox.workspace(sid)
    assert (await step(sandbox, sid, "pass")).ok
    before = usage_by_descriptors(ws)[1]
    try:
        made = await step(sandbox, sid, NEST, timeout_s=30)
        assert made.ok, made
        assert usage_by_descriptors(ws)[1] == before + 1101
        gone = await step(sandbox, sid, UNNEST, timeout_s=30)
        assert gone.ok, gone
        assert not (ws / "n").exists()
    finally:  # never leave a tree pytest's own clean-up (recursive) cannot remove
        if (ws / "n").exists():
            resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
            fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
            try:
                isolation_root.remove_tree(fd, "n")
            finally:
                os.close(fd)
