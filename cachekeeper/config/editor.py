"""Editing a config file in place (`suggest --apply`): comments, key order and layout kept.

The project's reader (reader.py/schema.py) is line-aware for error messages; it never writes. Editing is
ruamel.yaml's round-trip job. An edit is read, changed, checked with the real schema, and written only if
the file still holds the bytes it read (temp file, then rename): a config someone changed meanwhile is
refused, never overwritten.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError
from ..format.spec import Shape
from .model import Config
from .schema import parse_config

# (mapping, sequence, offset) indents: the first whose plain round trip reproduces the file is used.
_INDENTS = ((2, 4, 2), (2, 2, 0), (4, 6, 4), (4, 4, 0))


@dataclass(frozen=True)
class ConfigEdit:
    path: Path
    text: str
    digest: str

    @classmethod
    def read(cls, path: str | Path) -> ConfigEdit:
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read config: {exc.strerror or exc}", path=str(p)) from None
        return cls(p, data.decode("utf-8"), hashlib.sha256(data).hexdigest())

    def add_shapes(self, config: Config, additions: Mapping[str, Sequence[Shape]]) -> tuple[str, list[str]]:
        """(the config's text with `additions` (model -> shapes) added to each model's own `shapes`, one line
        per model whose list it had to unshare). A model that inherits `defaults.shapes`, or uses the product
        form, gets an explicit list of the shapes it had plus the new ones; a model whose list other keys
        share through a YAML anchor/alias (`shapes: *common`, a `<<:` merge) gets its own copy plus the new
        ones. Either way no other model changes."""
        yaml, doc = self._load()
        models = {str(m.get("name")): m for m in doc.get("models") or () if hasattr(m, "get")}
        uses = _references(doc)
        notes: list[str] = []
        for name, shapes in additions.items():
            node = models.get(name)
            if node is None:
                raise UsageError(f"{self.path}: no model named {name!r} to add shapes to", path=str(self.path))
            have = set(config.model(name).shapes)
            new = [s for s in dict.fromkeys(shapes) if s not in have]
            if not new:
                continue
            current = node.get("shapes")
            if isinstance(current, list) and uses.get(id(current), 0) > 1:
                anchor = getattr(getattr(current, "anchor", None), "value", None)
                copy = [str(item) for item in current] + [s.label() for s in new]
                node["shapes"] = _flow(copy) if _is_flow(current) else _block(copy)
                uses[id(current)] -= 1
                notes.append(f"model {name}'s shapes were shared with other keys through a YAML "
                             f"{'anchor &' + anchor if anchor else 'alias or merge'}; {name} now has its own "
                             "list and the others are unchanged")
            elif isinstance(current, list):
                current.extend(s.label() for s in new)
            else:
                node["shapes"] = _flow([s.label() for s in sorted(have)] + [s.label() for s in new])
        text = _dump(yaml, doc)
        parse_config(text, str(self.path), base_dir=self.path.parent)   # the result must validate
        return text, notes

    def write(self, text: str) -> None:
        """Replace the file, unless it changed since `read`."""
        from ..fs.atomic import atomic_write_bytes

        try:
            now = hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            now = ""
        if now != self.digest:
            raise UsageError(f"{self.path} changed since it was read; nothing was written",
                             "apply the suggestions again to the current file", path=str(self.path))
        atomic_write_bytes(self.path, text.encode("utf-8"))

    def _load(self) -> tuple[Any, Any]:
        from ruamel.yaml import YAML

        first: tuple[Any, Any] | None = None
        for mapping, sequence, offset in _INDENTS:
            yaml = YAML()   # round-trip mode
            yaml.preserve_quotes = True
            yaml.width = 4096
            yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
            doc = yaml.load(self.text)
            _keep_anchors(doc)
            if _dump(yaml, doc) == self.text:
                return yaml, doc
            first = first or (yaml, doc)
        assert first is not None
        return first


def _keep_anchors(doc: Any) -> None:
    """Dump every anchor the file has, aliased or not (ruamel drops one no alias uses, or no longer uses)."""
    from ruamel.yaml.comments import CommentedBase

    seen: set[int] = set()
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, CommentedBase):
            continue
        seen.add(id(node))
        if node.anchor.value:
            node.yaml_set_anchor(node.anchor.value, always_dump=True)
        stack.extend(node.values() if isinstance(node, dict) else node if isinstance(node, list) else ())


def _references(doc: Any) -> dict[int, int]:
    """How many places of the document each list or mapping is the value of: more than one means an
    anchor's aliases (or a `<<:` merge) share it, and changing it in place changes every one of them."""
    counts: dict[int, int] = {}
    stack = [doc]
    while stack:
        node = stack.pop()
        children = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else []
        for child in children:
            if isinstance(child, dict | list):
                counts[id(child)] = counts.get(id(child), 0) + 1
                if counts[id(child)] == 1:   # descend once: a recursive alias ends here
                    stack.append(child)
    return counts


def _is_flow(seq: Any) -> bool:
    fa = getattr(seq, "fa", None)
    return bool(fa is not None and fa.flow_style())


def _block(items: list[str]) -> Any:
    from ruamel.yaml.comments import CommentedSeq

    seq = CommentedSeq(items)
    seq.fa.set_block_style()
    return seq


def _flow(items: list[str]) -> Any:
    from ruamel.yaml.comments import CommentedSeq

    seq = CommentedSeq(items)
    seq.fa.set_flow_style()
    return seq


def _dump(yaml: Any, doc: Any) -> str:
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


__all__ = ["ConfigEdit"]
