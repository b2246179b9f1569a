"""Limits no step or model call can work within are refused at start, in one sentence: they used to
start fine and then fail every step (`DATATHREAD_STEP_MEMORY_MB=1`) or every model call
(`DATATHREAD_MAX_TOKENS=1000000000`, above any model's output limit). So is a total for one message's
shared files below one file's own cap (DATATHREAD_SHARED_FILE_MB would promise what is never taken)."""

from __future__ import annotations

import pytest

from core.config import ConfigError, load_settings
from core.config_data import MAX_TOKENS_RANGE
from core.config_sandbox import STEP_MEMORY_MIN_MB

LOW, HIGH = MAX_TOKENS_RANGE


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("DATATHREAD_STEP_MEMORY_MB", "1", "DATATHREAD_STEP_MEMORY_MB=1 is too little for a step to run in"),
        ("DATATHREAD_STEP_MEMORY_MB", str(STEP_MEMORY_MIN_MB - 1), f"at least {STEP_MEMORY_MIN_MB} MB"),
        ("DATATHREAD_STEP_MEMORY_MB", "0", "DATATHREAD_STEP_MEMORY_MB=0 is too little"),
        ("DATATHREAD_STEP_MEMORY_MB", str(STEP_MEMORY_MIN_MB), None),
        ("DATATHREAD_STEP_MEMORY_MB", "65536", None),
        (
            "DATATHREAD_MAX_TOKENS",
            "1000000000",
            f"DATATHREAD_MAX_TOKENS=1000000000 is not from {LOW} to {HIGH}",
        ),
        ("DATATHREAD_MAX_TOKENS", str(HIGH + 1), "the largest output a Claude model takes"),
        ("DATATHREAD_MAX_TOKENS", "1", f"DATATHREAD_MAX_TOKENS=1 is not from {LOW} to {HIGH}"),
        ("DATATHREAD_MAX_TOKENS", str(LOW), None),
        ("DATATHREAD_MAX_TOKENS", str(HIGH), None),
        (
            "DATATHREAD_SHARED_FILES_MB",
            "50",
            "DATATHREAD_SHARED_FILES_MB=50 is less than DATATHREAD_SHARED_FILE_MB=100",
        ),
        ("DATATHREAD_SHARED_FILES_MB", "0", "DATATHREAD_SHARED_FILES_MB=0"),
        ("DATATHREAD_SHARED_FILES_MB", "100", None),
        ("DATATHREAD_SHARED_FILES_MB", "1000", None),
    ],
)
def test_a_limit_nothing_can_work_within_is_one_sentence_at_start(name, value, said, monkeypatch, tmp_path):
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    if said is None:
        settings = load_settings(_env_file=None)
        assert getattr(settings, name.removeprefix("DATATHREAD_").lower()) == int(value)
        return
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    sentence = str(info.value)
    assert said in sentence and sentence.count(". ") == 0 and sentence.endswith(".") and "\n" not in sentence


def test_the_defaults_are_within_the_limits(monkeypatch, tmp_path):
    for name in ("DATATHREAD_STEP_MEMORY_MB", "DATATHREAD_MAX_TOKENS", "DATATHREAD_SHARED_FILES_MB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    settings = load_settings(_env_file=None)
    assert settings.step_memory_mb >= STEP_MEMORY_MIN_MB and LOW <= settings.max_tokens <= HIGH
    assert settings.shared_files_mb >= settings.shared_file_mb
