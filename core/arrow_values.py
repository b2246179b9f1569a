"""A column's values as Python objects for the two places that write them out — the preview the model
reads and the CSV people get — with a map as a dict (`{k1: 10}`) when it can be one, else its pairs.

Why not `to_pylist(maps_as_pydicts="lossy")`: it makes every map a dict, and a dict whose keys are
dates, decimals, bytes or timestamps — DuckDB's `histogram(d)` returns such maps — is not JSON, so the
CSV conversion failed ("keys must be str, int, float, bool or None, not datetime.date"); it also drops
all but one of a repeated key, silently but for a UserWarning that leaked into the step's output. So a
map is a dict only when every key is text, a number or a boolean and no key repeats; otherwise the
list of `[key, value]` pairs, nothing lost, as it was written before maps became dicts.
"""

from __future__ import annotations

from typing import Any

_DICT_KEYS = (str, int, float, bool)  # what JSON (and a reader of `{k: v}`) takes as a key


def py_values(column: Any) -> list:
    """`column` (an Arrow array or chunked array) as a list of Python values, maps as `_map` makes
    them. A column with no map anywhere in its type is plain `to_pylist`."""
    if not _has_map(column.type):
        return column.to_pylist()
    return [_convert(value, column.type) for value in column.to_pylist()]


def _has_map(kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_map(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _has_map(kind.value_type)
    if pa.types.is_struct(kind):
        return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _convert(value: Any, kind: Any) -> Any:
    """`value` (as `to_pylist` gave it: a map as a list of pairs) with its maps made by `_map`."""
    import pyarrow as pa

    if value is None or not _has_map(kind):
        return value
    if pa.types.is_map(kind):
        return _map([(_convert(k, kind.key_type), _convert(v, kind.item_type)) for k, v in value])
    if pa.types.is_struct(kind):
        return {
            f.name: _convert(value[f.name], f.type) for f in (kind.field(i) for i in range(kind.num_fields))
        }
    return [_convert(item, kind.value_type) for item in value]


def _map(pairs: list[tuple[Any, Any]]) -> dict | list:
    """A dict when every key can be a dict's and JSON's and no key repeats (`1` and `True` are one
    key to a dict), else `[[key, value], …]`."""
    keys = [key for key, _ in pairs]
    if all(isinstance(key, _DICT_KEYS) for key in keys) and len(set(keys)) == len(keys):
        return dict(pairs)
    return [[key, value] for key, value in pairs]
