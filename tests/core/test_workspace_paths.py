"""A workspace file found by the name the model and people know it by (core/workspace_paths.py)."""

from __future__ import annotations

import os

import pytest

from core.workspace_paths import named


def test_a_name_that_is_not_utf8_is_found_by_its_readable_name_the_exact_name_first(tmp_path):
    os.makedirs(os.path.join(bytes(tmp_path), b"K\xf6ln"))
    for name in (b"M\xfcnchen.csv", b"K\xf6ln/Dom.png", b"Z\xfcrich.csv", "Zürich.csv".encode()):
        with open(os.path.join(bytes(tmp_path), name), "wb") as f:
            f.write(name)
    ws = tmp_path.resolve()
    for given, real in [
        ("München.csv", b"M\xfcnchen.csv"),
        ("Köln/Dom.png", b"K\xf6ln/Dom.png"),
        ("Zürich.csv", "Zürich.csv".encode()),  # both read so: the file of that very name
        ("plain.csv", b"plain.csv"),  # not there: the name as given, for the read to say so
    ]:
        assert os.fsencode(named(ws, given)) == os.path.join(bytes(ws), real), given
    with pytest.raises(PermissionError):
        named(ws, "../München.csv")


def test_a_link_a_step_planted_is_never_walked(tmp_path, monkeypatch):
    """A step's symlink `M\\xfc` → a host folder: looking up "Mü/…" listed that host folder from the bot,
    and its errors told whether a host path existed."""
    host = tmp_path / "host"
    (host / "inner").mkdir(parents=True)
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    os.symlink(bytes(host), os.path.join(bytes(ws), b"M\xfc"))
    os.symlink(bytes(host / "inner"), os.path.join(bytes(ws), b"K\xf6ln"))
    listed: list[str] = []
    real_scandir = os.scandir

    def scandir(path):
        listed.append(os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    for given in ("Mü/inner/x.csv", "Mü/missing/x.csv", "Köln"):
        with pytest.raises((FileNotFoundError, PermissionError)):
            named(ws, given).open()  # the read after this fails too: nothing is found through a link
    assert not any(str(host) in p or "\udcfc" in p for p in listed), ascii(
        listed
    )  # (xdist sends no surrogate)
