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
