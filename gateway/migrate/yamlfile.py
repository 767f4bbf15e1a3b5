"""Merge model entries into the gateway config's ``dialects.<dialect>.models`` in place: ruamel.yaml's
round trip keeps the file's comments, order and the other entries; the file is rewritten only
when an entry differs from what it holds (a second import leaves it untouched)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq


def _yaml() -> YAML:
    y = YAML()  # round trip
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    return node


def _flow(value: Any) -> Any:
    if isinstance(value, dict):
        node = CommentedMap((k, _flow(v)) for k, v in value.items())
        node.fa.set_flow_style()
        return node
    if isinstance(value, list | tuple):
        seq = CommentedSeq(_flow(v) for v in value)
        seq.fa.set_flow_style()
        return seq
    return value


def _styled(entry: dict[str, Any]) -> CommentedMap:
    """A model entry in block style, ``signatures`` one flow-style line per signature."""
    out = CommentedMap()
    for key, value in entry.items():
        if key == "signatures":
            out[key] = CommentedMap((name, _flow(sig)) for name, sig in value.items())
        else:
            out[key] = _flow(value)
    return out


def merge(path: Path, dialect: str, models: dict[str, dict[str, Any]]) -> list[str]:
    """Set ``dialects.<dialect>.models.<name>`` for each model; the names whose entry changed."""
    y = _yaml()
    text = path.read_text() if path.is_file() else ""
    doc = y.load(text) if text.strip() else None
    if doc is None:
        doc = CommentedMap()
    section = doc
    for key in ("dialects", dialect, "models"):
        if not isinstance(section.get(key), dict):
            section[key] = CommentedMap()
        section = section[key]
    changed = []
    for name, entry in models.items():
        if name in section and _plain(section[name]) == _plain(entry):
            continue
        section[name] = _styled(entry)
        changed.append(name)
    if changed:
        buf = io.StringIO()
        y.dump(doc, buf)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(buf.getvalue())
    return changed


def set_value(path: Path, keys: tuple[str, ...], value: Any) -> list[str]:
    """Set one scalar at ``keys`` (e.g. dialects.grps.default_model); [its dotted name] when written."""
    y = _yaml()
    text = path.read_text() if path.is_file() else ""
    doc = (y.load(text) if text.strip() else None) or CommentedMap()
    node = doc
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = CommentedMap()
        node = node[key]
    if node.get(keys[-1]) == value:
        return []
    node[keys[-1]] = value
    buf = io.StringIO()
    y.dump(doc, buf)
    path.write_text(buf.getvalue())
    return [".".join(keys)]
