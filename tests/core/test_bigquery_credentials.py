"""GOOGLE_APPLICATION_CREDENTIALS loaded by the file's `type`, each type by its own constructor: never
google.auth's generic load_credentials_from_file, deprecated as a security risk (it loads whatever a
file claims to be, and warned so in every run); a file datathread cannot load is one sentence."""

from __future__ import annotations

import json
import warnings

import pytest
from google.auth import aws, external_account_authorized_user, identity_pool, impersonated_credentials
from google.oauth2 import credentials as user_credentials
from google.oauth2 import service_account

from core.bigquery_client import SCOPES, build_credentials
from core.config import ConfigError, load_settings
from tests.fakes.bigquery_api import service_account_key

AUTHORIZED_USER = {  # what `gcloud auth application-default login` writes
    "type": "authorized_user",
    "client_id": "c.apps.googleusercontent.com",
    "client_secret": "s",
    "refresh_token": "r",
}
POOL = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x"
FEDERATED = {  # workload identity federation
    "type": "external_account",
    "audience": POOL,
    "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
    "token_url": "https://sts.googleapis.com/v1/token",
}
KEYS = {
    "authorized_user": (AUTHORIZED_USER, user_credentials.Credentials),
    "impersonated_service_account": (
        {
            "type": "impersonated_service_account",
            "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/"
            "serviceAccounts/bq@p.iam.gserviceaccount.com:generateAccessToken",
            "source_credentials": AUTHORIZED_USER,
        },
        impersonated_credentials.Credentials,
    ),
    "external_account_file": (
        {**FEDERATED, "credential_source": {"file": "/var/run/token"}},
        identity_pool.Credentials,
    ),
    "external_account_aws": (
        {
            **FEDERATED,
            "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request",
            "credential_source": {
                "environment_id": "aws1",
                "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone",
                "url": "http://169.254.169.254/latest/meta-data/iam/security-credentials",
                "regional_cred_verification_url": "https://sts.{region}.amazonaws.com"
                "?Action=GetCallerIdentity&Version=2011-06-15",
            },
        },
        aws.Credentials,
    ),
    "external_account_authorized_user": (
        {
            "type": "external_account_authorized_user",
            "audience": POOL,
            "refresh_token": "r",
            "token_url": "https://sts.googleapis.com/v1/oauthtoken",
            "client_id": "c",
            "client_secret": "s",
        },
        external_account_authorized_user.Credentials,
    ),
}


def credentials_of(key) -> tuple:
    """build_credentials for a key file, with any warning an error (the deprecated loader warned)."""
    settings = load_settings(_env_file=None, warehouse="bigquery", google_application_credentials=key)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return build_credentials(settings)


def test_a_service_account_key_file_loads_with_its_project_and_no_warning(tmp_path):
    key = service_account_key(tmp_path / "key.json", "https://oauth2.googleapis.com/token")
    creds, project = credentials_of(key)
    assert isinstance(creds, service_account.Credentials)
    assert project == "bill" and creds.service_account_email == "datathread@bill.iam.gserviceaccount.com"
    assert tuple(creds.scopes) == SCOPES


@pytest.mark.parametrize("kind", list(KEYS))
def test_each_other_credentials_type_loads_by_its_own_constructor(tmp_path, kind):
    """No network call either: the external account's project, which google.auth looked up over the
    network, comes from GCP_PROJECT."""
    info, expected = KEYS[kind]
    key = tmp_path / "creds.json"
    key.write_text(json.dumps(info))
    creds, project = credentials_of(key)
    assert type(creds) is expected and project is None


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        (
            {"type": "gdch_service_account", "project": "p"},
            "holds 'gdch_service_account' credentials, which datathread does not load: use a "
            "service-account key, or one of authorized_user, impersonated_service_account, "
            "external_account, external_account_authorized_user.",
        ),
        ({"type": "authorized_user"}, "holds no usable authorized_user credentials (authorized user info "),
        ({**FEDERATED, "credential_source": "a string"}, "holds no usable external_account credentials ("),
        ({"type": 7}, "is not a service-account JSON key file."),
    ],
    ids=["unsupported_type", "authorized_user_missing_fields", "external_account_malformed", "type_no_text"],
)
def test_a_credentials_file_datathread_cannot_load_is_one_sentence(tmp_path, content, sentence):
    key = tmp_path / "creds.json"
    key.write_text(json.dumps(content))
    with pytest.raises(ConfigError) as refused:
        credentials_of(key)
    message = str(refused.value)
    assert message.startswith(f"GOOGLE_APPLICATION_CREDENTIALS ({key}) {sentence}"), message
    assert message.endswith(".") and "\n" not in message and "Error(" not in message


def test_a_key_file_gone_since_the_settings_were_read_is_one_sentence(tmp_path):
    key = service_account_key(tmp_path / "key.json", "https://oauth2.googleapis.com/token")
    settings = load_settings(_env_file=None, warehouse="bigquery", google_application_credentials=key)
    key.unlink()
    with pytest.raises(ConfigError) as refused:
        build_credentials(settings)
    assert str(refused.value) == (
        f"GOOGLE_APPLICATION_CREDENTIALS ({key}) does not exist: name a credentials JSON file."
    )
