"""Modal credentials found as the Modal client finds them (environment first, then the active profile
of ~/.modal.toml or MODAL_CONFIG_PATH), from real files in a temporary home; table-driven."""

from __future__ import annotations

import pytest

from core.modal_credentials import missing_credentials

TOKENS = {"MODAL_TOKEN_ID": "ak-1", "MODAL_TOKEN_SECRET": "as-1"}
DEFAULT = '[default]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n'
ACTIVE_OTHER = (
    '[default]\ntoken_id = "ak-1"\n[work]\nactive = true\ntoken_id = "ak-2"\ntoken_secret = "as-2"\n'
)


@pytest.mark.parametrize(
    ("env", "toml", "found"),
    [
        ({}, None, False),
        (TOKENS, None, True),
        ({"MODAL_TOKEN_ID": "ak-1"}, None, False),  # half a token
        ({}, DEFAULT, True),
        (
            {"MODAL_TOKEN_SECRET": "as-9"},
            '[default]\ntoken_id = "ak-1"\n',
            True,
        ),  # the env completes the file
        ({}, ACTIVE_OTHER, True),  # the profile marked active
        ({"MODAL_PROFILE": "default"}, ACTIVE_OTHER, False),  # default has no secret
        ({"MODAL_PROFILE": "nope"}, DEFAULT, False),
        ({}, '[other]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n', False),  # not the active one
        (
            {
                "MODAL_OAUTH_REFRESH_TOKEN": "r",
                "MODAL_OAUTH_CLIENT_ID": "c",
                "MODAL_OAUTH_CLIENT_SECRET": "s",
            },
            None,
            True,
        ),
        ({"MODAL_IS_REMOTE": "1"}, None, True),  # inside a Modal container: its own identity
    ],
)
def test_credentials_are_found_where_the_modal_client_looks(env, toml, found, tmp_path):
    if toml is not None:
        (tmp_path / ".modal.toml").write_text(toml)
    problem = missing_credentials(env, tmp_path)
    assert (problem is None) is found, problem
    if problem:
        assert "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in problem and "modal token new" in problem


def test_modal_config_path_is_read_instead_of_the_home_file(tmp_path):
    (tmp_path / "elsewhere.toml").write_text(DEFAULT)
    assert (
        missing_credentials({"MODAL_CONFIG_PATH": str(tmp_path / "elsewhere.toml")}, tmp_path / "none")
        is None
    )


def test_a_settings_file_that_is_not_toml_is_named(tmp_path):
    (tmp_path / ".modal.toml").write_text("token_id = \n")
    problem = missing_credentials({}, tmp_path)
    assert problem and str(tmp_path / ".modal.toml") in problem and "cannot be read" in problem
