"""Policy for model-written code: the one import point for deciding whether SQL or Python may run.

The model writes SQL and Python that we treat as untrusted. This package-level module re-exports:

- ``check_sql`` / ``TableAllowlist`` (``core.policy_sql``): one read-only statement, allowed tables
  only, no file/setting/environment access — except relative workspace files for ``run_sql``.
- ``check_python`` (``core.policy_python``): early, friendly feedback on code the sandbox would block.
- ``Verdict`` / ``TableAllowlist`` (``core.policy_types``): the shared types, in their own module so
  neither sub-module has to import this one (which would make the import order matter).

Everything here is pure: no I/O and no mutable module state.
"""

from core.policy_python import check_python
from core.policy_sql import DIALECTS, check_sql
from core.policy_types import TableAllowlist, Verdict

__all__ = ["DIALECTS", "TableAllowlist", "Verdict", "check_python", "check_sql"]
