"""Settings: every environment variable of the design, read once into one typed object.

The object is built at start (`load_settings`) and passed explicitly; nothing else reads the
environment. Defaults need no account: DuckDB demo data, local sandbox, SQLite store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message is one actionable sentence for a person."""


class Settings(BaseSettings):
    """All of datathread's configuration. Field names are ours; aliases are the contract's env names."""

    # No populate_by_name: with it, pydantic-settings also reads each *field name* from the environment,
    # so $HOME would override DATATHREAD_HOME (and $MODEL, $SANDBOX… other settings).
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    # --- model -------------------------------------------------------------------------------
    anthropic_api_key: SecretStr | None = Field(None, validation_alias=_env("ANTHROPIC_API_KEY"))
    anthropic_base_url: str | None = Field(None, validation_alias=_env("ANTHROPIC_BASE_URL"))
    model: str = Field("claude-sonnet-4-5", validation_alias=_env("DATATHREAD_MODEL"))
    model_provider: Literal["anthropic", "bedrock", "vertex"] = Field(
        "anthropic", validation_alias=_env("DATATHREAD_MODEL_PROVIDER")
    )
    aws_region: str | None = Field(None, validation_alias=_env("AWS_REGION", "AWS_DEFAULT_REGION"))
    vertex_project: str | None = Field(None, validation_alias=_env("ANTHROPIC_VERTEX_PROJECT_ID"))
    vertex_region: str | None = Field(None, validation_alias=_env("CLOUD_ML_REGION"))
    max_tokens: int = Field(4096, validation_alias=_env("DATATHREAD_MAX_TOKENS"))
    max_steps: int = Field(16, validation_alias=_env("DATATHREAD_MAX_STEPS"))
    model_retries: int = Field(4, validation_alias=_env("DATATHREAD_MODEL_RETRIES"))
    model_timeout: float = Field(120.0, validation_alias=_env("DATATHREAD_MODEL_TIMEOUT"))
    turn_token_budget: int = Field(400_000, validation_alias=_env("DATATHREAD_TURN_TOKEN_BUDGET"))

    # --- Slack -------------------------------------------------------------------------------
    slack_bot_token: SecretStr | None = Field(None, validation_alias=_env("SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(None, validation_alias=_env("SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(None, validation_alias=_env("SLACK_APP_TOKEN"))
    slack_api_url: str = Field("https://slack.com/api/", validation_alias=_env("DATATHREAD_SLACK_API_URL"))
    slash_command: str = Field("/ask", validation_alias=_env("DATATHREAD_SLASH_COMMAND"))

    # --- Teams -------------------------------------------------------------------------------
    microsoft_app_id: str | None = Field(None, validation_alias=_env("MICROSOFT_APP_ID"))
    microsoft_app_password: SecretStr | None = Field(None, validation_alias=_env("MICROSOFT_APP_PASSWORD"))
    microsoft_app_tenant_id: str | None = Field(None, validation_alias=_env("MICROSOFT_APP_TENANT_ID"))
    microsoft_app_type: str = Field("MultiTenant", validation_alias=_env("MICROSOFT_APP_TYPE"))
    bot_openid_metadata_url: str | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BOT_OPENID_METADATA_URL"),
        description="OpenID metadata for channel tokens (botbuilder's BotOpenIdMetadata); default Microsoft's.",
    )

    # --- warehouse ---------------------------------------------------------------------------
    warehouse: Literal["duckdb", "bigquery"] = Field("duckdb", validation_alias=_env("DATATHREAD_WAREHOUSE"))
    gcp_project: str | None = Field(None, validation_alias=_env("GCP_PROJECT"))
    google_application_credentials: Path | None = Field(
        None, validation_alias=_env("GOOGLE_APPLICATION_CREDENTIALS")
    )
    gcp_service_account_json: SecretStr | None = Field(
        None, validation_alias=_env("GCP_SERVICE_ACCOUNT_JSON")
    )
    bigquery_api_url: str | None = Field(None, validation_alias=_env("DATATHREAD_BIGQUERY_API_URL"))
    bigquery_datasets: str = Field(
        "",
        validation_alias=_env("DATATHREAD_BIGQUERY_DATASETS"),
        description="Comma-separated allowlist of project.dataset patterns (empty = every dataset of GCP_PROJECT).",
    )
    bigquery_location: str | None = Field(None, validation_alias=_env("DATATHREAD_BIGQUERY_LOCATION"))
    query_soft_cap_bytes: int = Field(10 * 10**9, validation_alias=_env("DATATHREAD_QUERY_SOFT_CAP_BYTES"))
    query_hard_cap_bytes: int = Field(100 * 10**9, validation_alias=_env("DATATHREAD_QUERY_HARD_CAP_BYTES"))
    table_notes: Path | None = Field(None, validation_alias=_env("DATATHREAD_TABLE_NOTES"))
    bigquery_default_dataset: str | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BIGQUERY_DEFAULT_DATASET"),
        description="'project.dataset' (or 'dataset' of GCP_PROJECT) that bare table names resolve in.",
    )
    bigquery_price_per_tib: float = Field(6.25, validation_alias=_env("DATATHREAD_BIGQUERY_PRICE_PER_TIB"))
    bigquery_turn_bytes: int = Field(500 * 10**9, validation_alias=_env("DATATHREAD_BIGQUERY_TURN_BYTES"))
    bigquery_user_day_bytes: int = Field(
        2 * 10**12, validation_alias=_env("DATATHREAD_BIGQUERY_USER_DAY_BYTES")
    )
    bigquery_channel_day_bytes: int = Field(
        5 * 10**12, validation_alias=_env("DATATHREAD_BIGQUERY_CHANNEL_DAY_BYTES")
    )
    bigquery_metadata_ttl: float = Field(600.0, validation_alias=_env("DATATHREAD_BIGQUERY_METADATA_TTL"))
    bigquery_use_storage_api: bool = Field(
        False, validation_alias=_env("DATATHREAD_BIGQUERY_USE_STORAGE_API")
    )

    # --- sandbox and state -------------------------------------------------------------------
    sandbox: Literal["local", "modal"] = Field("local", validation_alias=_env("DATATHREAD_SANDBOX"))
    home: Path = Field(Path(".datathread"), validation_alias=_env("DATATHREAD_HOME"))
    step_timeout: float = Field(120.0, validation_alias=_env("DATATHREAD_STEP_TIMEOUT"))
    step_memory_mb: int = Field(4096, validation_alias=_env("DATATHREAD_STEP_MEMORY_MB"))
    step_output_bytes: int = Field(20_000, validation_alias=_env("DATATHREAD_STEP_OUTPUT_BYTES"))
    step_file_mb: int = Field(1024, validation_alias=_env("DATATHREAD_STEP_FILE_MB"))
    workspace_mb: int = Field(2048, validation_alias=_env("DATATHREAD_WORKSPACE_MB"))
    preview_rows: int = Field(20, validation_alias=_env("DATATHREAD_PREVIEW_ROWS"))
    preview_bytes: int = Field(8_000, validation_alias=_env("DATATHREAD_PREVIEW_BYTES"))
    redis_url: str | None = Field(None, validation_alias=_env("REDIS_URL"))
    # Turns running at once per process. Turns mostly wait on the model, but their CPU work shares the
    # event loop that must ack Slack within 3 s: 4 per core keeps the ack tail short on small hosts.
    max_concurrent_turns: int = Field(
        default_factory=lambda: max(4, 4 * (os.cpu_count() or 1)),
        validation_alias=_env("DATATHREAD_MAX_CONCURRENT_TURNS"),
    )
    history_ttl_days: int = Field(30, validation_alias=_env("DATATHREAD_HISTORY_TTL_DAYS"))
    lock_ttl: float = Field(
        60.0,
        validation_alias=_env("DATATHREAD_LOCK_TTL"),
        description="Seconds a session lock outlives a replica that died mid-turn (renewed while alive).",
    )

    # --- Modal (production deployment; see docs/MODAL.md) -----------------------------------
    modal_app: str = Field("datathread", validation_alias=_env("DATATHREAD_MODAL_APP"))
    modal_volume: str = Field("datathread-workspaces", validation_alias=_env("DATATHREAD_MODAL_VOLUME"))
    modal_secrets: str = Field(
        "datathread-anthropic,datathread-slack,datathread-teams,datathread-gcp,datathread-redis",
        validation_alias=_env("DATATHREAD_MODAL_SECRETS"),
        description="Comma-separated Modal Secret names given to the web and turn functions (never the sandbox).",
    )
    modal_min_containers: int = Field(0, validation_alias=_env("DATATHREAD_MODAL_MIN_CONTAINERS"))
    modal_step_min_containers: int = Field(0, validation_alias=_env("DATATHREAD_MODAL_STEP_MIN_CONTAINERS"))
    modal_scaledown_window: int = Field(300, validation_alias=_env("DATATHREAD_MODAL_SCALEDOWN_WINDOW"))
    modal_turn_timeout: int = Field(900, validation_alias=_env("DATATHREAD_MODAL_TURN_TIMEOUT"))

    # --- object storage ----------------------------------------------------------------------
    s3_buckets: str = Field(
        "",
        validation_alias=_env("DATATHREAD_S3_BUCKETS"),
        description="Comma-separated bucket[/prefix] entries the bot may read.",
    )
    s3_max_file_mb: int = Field(512, validation_alias=_env("DATATHREAD_S3_MAX_FILE_MB"))
    s3_endpoint_url: str | None = Field(None, validation_alias=_env("DATATHREAD_S3_ENDPOINT_URL"))
    files_bucket: str | None = Field(None, validation_alias=_env("DATATHREAD_FILES_BUCKET"))

    # --- serving -----------------------------------------------------------------------------
    public_url: str = Field("http://localhost:3000", validation_alias=_env("DATATHREAD_PUBLIC_URL"))
    link_secret: SecretStr | None = Field(None, validation_alias=_env("DATATHREAD_LINK_SECRET"))
    link_ttl_seconds: int = Field(3600, validation_alias=_env("DATATHREAD_LINK_TTL_SECONDS"))

    # --- access control and limits -----------------------------------------------------------
    allowed_teams: str = Field("", validation_alias=_env("DATATHREAD_ALLOWED_TEAMS"))
    allowed_channels: str = Field("", validation_alias=_env("DATATHREAD_ALLOWED_CHANNELS"))
    allowed_users: str = Field("", validation_alias=_env("DATATHREAD_ALLOWED_USERS"))
    admin_users: str = Field("", validation_alias=_env("DATATHREAD_ADMIN_USERS"))
    channel_datasets: str = Field(
        "",
        validation_alias=_env("DATATHREAD_CHANNEL_DATASETS"),
        description="Per-channel dataset allowlists: 'C123=finance.*|shared.*;C456=ops.*'.",
    )
    user_turns_per_hour: int = Field(60, validation_alias=_env("DATATHREAD_USER_TURNS_PER_HOUR"))
    channel_turns_per_hour: int = Field(300, validation_alias=_env("DATATHREAD_CHANNEL_TURNS_PER_HOUR"))

    @property
    def workspaces_dir(self) -> Path:
        """Where per-session workspace directories live (shared by replicas on one host)."""
        return self.home.resolve() / "workspaces"

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


def split_list(value: str) -> tuple[str, ...]:
    """Comma-separated setting → tuple of trimmed, non-empty items."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


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
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        raise ConfigError(f"Invalid setting {where}: {first.get('msg')}.") from None


def require_model(settings: Settings) -> None:
    """Fail fast, in one sentence, when no model credentials are configured."""
    if not settings.has_model_credentials():
        raise ConfigError(
            "No Claude API key: set ANTHROPIC_API_KEY (in the environment or a .env file), "
            "or DATATHREAD_MODEL_PROVIDER=bedrock/vertex with its region and project."
        )
