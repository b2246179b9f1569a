"""Settings of where steps run and state lives: the sandbox, its limits, the session store and Modal.

Mixed into `core.config.Settings` (which reads them from the environment); split out so each settings
module stays one screenful of one subject.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator, model_validator

from core.config_types import RedisUrl, StateHome

_env = AliasChoices  # a field's environment variable names (the contract's)
# The least memory a step may be given. Measured with the local sandbox (a forked child of the fork
# server, its own cgroup and RLIMIT_AS): a trivial pandas step ran in 16 MB, a matplotlib chart in 32,
# `SELECT * FROM flights` of the demo (336,776 rows) in 96 and that result read whole into pandas in
# 192. Below that every step failed with "hit the memory limit" while the bot started as if all was well.
STEP_MEMORY_MIN_MB = 256


class SandboxSettings(BaseModel):
    """The local or Modal sandbox, per-step limits, the workspace quota, the state directory."""

    sandbox: Literal["local", "modal"] = Field(
        "local", validation_alias=_env("DATATHREAD_SANDBOX"), description="local (this host) or modal."
    )
    isolation: Literal["strict", "best", "root", "userns", "landlock", "seatbelt", "none"] | None = Field(
        None,
        validation_alias=_env("DATATHREAD_ISOLATION"),
        description="strict: refuse steps without network and filesystem isolation (default for serve); "
        "best: the best this host allows, warning what is OFF (default for chat/ask); or one back end's name.",
    )
    home: StateHome = Field(
        Path(".datathread"),
        validation_alias=_env("DATATHREAD_HOME"),
        description="Directory of local state: store, workspaces, demo warehouse, logs.",
    )
    step_timeout: float = Field(
        120.0,
        gt=0,
        validation_alias=_env("DATATHREAD_STEP_TIMEOUT"),
        description="Seconds one sandbox step may run.",
    )
    step_memory_mb: int = Field(
        4096,
        validation_alias=_env("DATATHREAD_STEP_MEMORY_MB"),
        description=f"Memory one step may use (MB; at least {STEP_MEMORY_MIN_MB}: Python with pandas, "
        "matplotlib and DuckDB needs that much for the demo's largest table).",
    )
    step_output_bytes: int = Field(
        20_000,
        gt=0,
        validation_alias=_env("DATATHREAD_STEP_OUTPUT_BYTES"),
        description="Bytes of a step's output the model sees.",
    )
    step_file_mb: int = Field(
        1024,
        gt=0,
        validation_alias=_env("DATATHREAD_STEP_FILE_MB"),
        description="Largest file a step may write (MB).",
    )
    workspace_mb: int = Field(
        2048,
        gt=0,
        validation_alias=_env("DATATHREAD_WORKSPACE_MB"),
        description="Quota of one thread's workspace (MB): a hard limit on the root and userns back ends, a watchdog on landlock and none.",
    )
    preview_rows: int = Field(
        20,
        gt=0,
        validation_alias=_env("DATATHREAD_PREVIEW_ROWS"),
        description="Rows of a result the model sees.",
    )
    preview_bytes: int = Field(
        8_000,
        gt=0,
        validation_alias=_env("DATATHREAD_PREVIEW_BYTES"),
        description="Bytes of a preview the model sees.",
    )
    redis_url: RedisUrl | None = Field(
        None,
        validation_alias=_env("REDIS_URL"),
        description="Redis for sessions, locks and de-dup (unset = SQLite under DATATHREAD_HOME).",
    )
    # Turns running at once per process. Turns mostly wait on the model, but their CPU work shares the
    # event loop that must ack Slack within 3 s: 4 per core keeps the ack tail short on small hosts.
    max_concurrent_turns: int = Field(
        default_factory=lambda: max(4, 4 * (os.cpu_count() or 1)),
        gt=0,
        validation_alias=_env("DATATHREAD_MAX_CONCURRENT_TURNS"),
        description="Turns running at once per process (default 4 per core).",
    )
    turn_workers: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 1) // 2),
        ge=0,
        validation_alias=_env("DATATHREAD_TURN_WORKERS"),
        description="Processes of `datathread serve` that run turns (0 = in the web process; default 1 per 2 cores).",
    )
    history_ttl_days: int = Field(
        30,
        gt=0,
        validation_alias=_env("DATATHREAD_HISTORY_TTL_DAYS"),
        description="Days a thread's history is kept; `serve` and `slack --socket` then remove its local workspace once nobody has written to it for as long. A follow-up after that starts fresh, and its answer says so.",
    )
    audit_ttl_days: int = Field(
        90,
        ge=0,
        validation_alias=_env("DATATHREAD_AUDIT_TTL_DAYS"),
        description="Days a turn's record (the audit trail, Show SQL, votes) is kept after it started (0 = for ever).",
    )
    log_days: int = Field(
        14,
        ge=0,
        validation_alias=_env("DATATHREAD_LOG_DAYS"),
        description="Days the log file (DATATHREAD_HOME/logs/datathread.log, which holds people's questions at INFO and DEBUG) keeps a record: it starts a new file each day and deletes the files older than this, and each file is still cut at 5 MB (0 = by size alone: four files of 5 MB, however old).",
    )
    release: str = Field(
        "",
        validation_alias=_env("DATATHREAD_RELEASE"),
        description="The release `--version`, `doctor` and `/healthz` name, and the session store records (unset: the package version plus the commit of the git checkout it runs from; the Modal deploy sets it from the deployer's checkout).",
    )
    lock_ttl: float = Field(
        60.0,
        gt=0,
        validation_alias=_env("DATATHREAD_LOCK_TTL"),
        description="Seconds a session lock outlives a replica on another host that died mid-turn (renewed while alive; on this host a dead holder is seen at once).",
    )

    # --- Modal (production deployment; see docs/MODAL.md) -----------------------------------
    modal_app: str = Field(
        "datathread", validation_alias=_env("DATATHREAD_MODAL_APP"), description="Modal app name."
    )
    modal_volume: str = Field(
        "datathread-workspaces",
        validation_alias=_env("DATATHREAD_MODAL_VOLUME"),
        description="Modal Volume of the workspaces.",
    )
    modal_secrets: str = Field(
        "datathread-anthropic,datathread-slack,datathread-teams,datathread-gcp,datathread-redis",
        validation_alias=_env("DATATHREAD_MODAL_SECRETS"),
        description="Comma-separated Modal Secret names given to the web and turn functions (never the sandbox).",
    )
    modal_store_secret: str = Field(
        "datathread-redis",
        validation_alias=_env("DATATHREAD_MODAL_STORE_SECRET"),
        description="The Modal Secret holding REDIS_URL: the only secret the hourly Volume sweep gets.",
    )
    modal_min_containers: int = Field(
        0, ge=0, validation_alias=_env("DATATHREAD_MODAL_MIN_CONTAINERS"), description="Warm web containers."
    )
    modal_step_min_containers: int = Field(
        0,
        ge=0,
        validation_alias=_env("DATATHREAD_MODAL_STEP_MIN_CONTAINERS"),
        description="Warm sandbox containers.",
    )
    modal_max_containers: int = Field(
        10,
        gt=0,
        validation_alias=_env("DATATHREAD_MODAL_MAX_CONTAINERS"),
        description="Most web containers, and most turn containers (8 turns each), Modal may start at once.",
    )
    modal_step_max_containers: int = Field(
        20,
        gt=0,
        validation_alias=_env("DATATHREAD_MODAL_STEP_MAX_CONTAINERS"),
        description="Most sandbox containers (one step each) Modal may start at once; further steps wait.",
    )
    modal_scaledown_window: int = Field(
        300,
        ge=2,
        le=3600,
        validation_alias=_env("DATATHREAD_MODAL_SCALEDOWN_WINDOW"),
        description="Seconds an idle container stays up (2 to 3600, Modal's bounds).",
    )
    modal_turn_timeout: int = Field(
        900,
        gt=0,
        validation_alias=_env("DATATHREAD_MODAL_TURN_TIMEOUT"),
        description="Seconds one turn may run on Modal.",
    )

    @field_validator("step_memory_mb")
    @classmethod
    def _step_memory_enough(cls, value: int) -> int:
        """DATATHREAD_STEP_MEMORY_MB=1 started fine, then every step failed with "hit the memory limit
        (1 MB)": a limit no step can run in is refused at start instead."""
        if value < STEP_MEMORY_MIN_MB:
            raise ValueError(
                f"is too little for a step to run in: Python with pandas and DuckDB needs at least "
                f"{STEP_MEMORY_MIN_MB} MB (the default is 4096)"
            )
        return value

    @model_validator(mode="after")
    def _warm_within_max(self) -> SandboxSettings:
        """Modal refuses a deploy whose warm containers exceed its cap; say which two settings clash."""
        pairs = (
            (
                "DATATHREAD_MODAL_MIN_CONTAINERS",
                self.modal_min_containers,
                "DATATHREAD_MODAL_MAX_CONTAINERS",
                self.modal_max_containers,
            ),
            (
                "DATATHREAD_MODAL_STEP_MIN_CONTAINERS",
                self.modal_step_min_containers,
                "DATATHREAD_MODAL_STEP_MAX_CONTAINERS",
                self.modal_step_max_containers,
            ),
        )
        for low_name, low, high_name, high in pairs:
            if low > high:
                raise ValueError(
                    f"{low_name}={low} is more than {high_name}={high}; lower the first or raise the second"
                )
        return self
