"""Settings of the files people share with a question: how large one may be, and all of one message's.

Mixed into `core.config.Settings` (which reads them from the environment). A surface holds a message's
files in the bot's own process until the core has written them into the workspace; with the local
runner that process is the web server, so the total is what one message may take of its memory.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field, model_validator

_env = AliasChoices  # a field's environment variable names (the contract's)


class SharedFileSettings(BaseModel):
    """DATATHREAD_SHARED_FILE_MB (each file) and DATATHREAD_SHARED_FILES_MB (a message's files together)."""

    shared_file_mb: int = Field(
        100,
        gt=0,
        validation_alias=_env("DATATHREAD_SHARED_FILE_MB"),
        description="Largest file a person may share with a question (MB); larger ones are not fetched, and the answer says so.",
    )
    # 200: one file at the largest the default allows and as much again for the others (ten files of
    # 20 MB pass), while ten files at the per-file cap would hold 1 GB of the web server's memory (the
    # local runner runs turns there) for a single message.
    shared_files_mb: int = Field(
        200,
        gt=0,
        validation_alias=_env("DATATHREAD_SHARED_FILES_MB"),
        description="All the files shared with one message together (MB): what one message may hold in the bot's memory; a file that would pass it is not fetched, and the answer says so.",
    )

    @model_validator(mode="after")
    def _total_holds_one_file(self) -> SharedFileSettings:
        """A total below one file's cap would make DATATHREAD_SHARED_FILE_MB a promise never kept."""
        if self.shared_files_mb < self.shared_file_mb:
            raise ValueError(
                f"DATATHREAD_SHARED_FILES_MB={self.shared_files_mb} is less than DATATHREAD_SHARED_FILE_MB="
                f"{self.shared_file_mb}, so no file could be as large as that allows: raise the first or "
                "lower the second"
            )
        return self
