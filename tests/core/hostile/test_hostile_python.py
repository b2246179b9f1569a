"""The Python half of the hostile corpus (run_python): every case through the real tool path, then
straight into the sandbox with the policy bypassed (tests/core/hostile/corpus.py)."""

from __future__ import annotations

import pytest

from tests.core.hostile.corpus import (
    PY_CASES,
    Case,
    Env,
    check_nothing_changed_outside_the_workspace,
    check_through_the_tool_path,
    check_with_the_policy_bypassed,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize("case", PY_CASES, ids=lambda c: c.id)
async def test_hostile_case_through_the_tool_path(env: Env, case: Case):
    await check_through_the_tool_path(env, case)


@pytest.mark.parametrize("case", PY_CASES, ids=lambda c: c.id)
async def test_hostile_case_with_the_policy_bypassed(env: Env, case: Case):
    await check_with_the_policy_bypassed(env, case)


async def test_zz_nothing_changed_outside_the_workspace(env: Env):
    """Runs last (file order): this module's cases left the home, canary, victim and warehouse intact."""
    check_nothing_changed_outside_the_workspace(env)
