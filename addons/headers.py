"""Header lookups the addons repeat on every flow, answered from one pass over the fields.

mitmproxy's ``Headers.get`` scans every field and lowercases each name on every lookup, and
the addons ask about a dozen times per request. ``header`` indexes a ``Headers.fields`` tuple
once and answers from the index while the headers still hold that very tuple: every change
to a ``Headers`` object replaces it, so an index never outlives what it describes.
"""

from __future__ import annotations

INDEXES_KEPT = 256  # fields tuples indexed at once: the flows in flight, with room to spare

# id(fields) -> (fields, index); holding the tuple keeps its id from being reused meanwhile
_indexes: dict[int, tuple[tuple, dict[str, str]]] = {}


def header(headers, name: str, default: str | None = "") -> str | None:
    """``headers.get(name, default)``; ``name`` in lower case."""
    return _index(headers).get(name, default)


def names(headers):
    """The names present, in lower case (a view: reading is all it is for)."""
    return _index(headers).keys()


def set_header(headers, name: str, value: str) -> None:
    """``headers[name] = value`` (the first field of that name keeps its place, the others go);
    ``name`` in lower case. The index of the old fields, edited, describes the new ones."""
    raw_name, raw_value = name.encode("utf-8", "surrogateescape"), value.encode("utf-8", "surrogateescape")
    kept, found = [], False
    for field in headers.fields:
        if field[0].lower() != raw_name:
            kept.append(field)
        elif not found:
            kept.append((field[0], raw_value))
            found = True
    if not found:
        kept.append((raw_name, raw_value))
    index = {**_index(headers), name: value}
    headers.fields = fields = tuple(kept)
    _remember(fields, index)


def content(message, strict: bool = False) -> bytes | None:
    """``message.get_content(strict)``, its content-encoding read through the index."""
    if message.raw_content is None or header(message.headers, "content-encoding"):
        return message.get_content(strict)
    return message.raw_content


def _index(headers) -> dict[str, str]:
    fields = headers.fields
    entry = _indexes.get(id(fields))
    if entry is not None and entry[0] is fields:
        return entry[1]
    index: dict[str, str] = {}
    for raw_name, raw_value in fields:
        name = raw_name.lower().decode("utf-8", "surrogateescape")  # bytes.lower(), as Headers does
        value = raw_value.decode("utf-8", "surrogateescape")
        index[name] = f"{index[name]}, {value}" if name in index else value  # folded, as Headers.get does
    _remember(fields, index)
    return index


def _remember(fields: tuple, index: dict[str, str]) -> None:
    if len(_indexes) >= INDEXES_KEPT:
        _indexes.clear()
    _indexes[id(fields)] = (fields, index)
