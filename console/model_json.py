"""The model's JSON (`snapshot --json`): dataclasses as objects, tuples as lists; a field's metadata may
leave it out (NOT_JSON) or say how it is written (json_as)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

NOT_JSON: dict[str, Any] = {"json": False}  # a field's metadata: left out of to_jsonable


def json_as(fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A field's metadata: its JSON is fn(the record holding it)."""
    return {"json": fn}


def to_jsonable(obj: Any) -> Any:
    """Dataclasses → dicts (a field marked NOT_JSON left out, one marked json_as(fn) written as fn(record)),
    tuples → lists; recursion without copying twice."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            how = f.metadata.get("json", True)
            if how is True:
                out[f.name] = to_jsonable(getattr(obj, f.name))
            elif how is not False:  # a function of the record: the field's JSON
                out[f.name] = how(obj)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj
