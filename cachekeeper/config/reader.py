"""A line-aware YAML reader: typed values out of a composed node tree, each error naming FILE:LINE.

The file is read with `yaml.compose` rather than `safe_load` so every value keeps its line. Nothing here
knows cachekeeper's schema (config/schema.py does); this module stays light (yaml + stdlib) because the
hydrate boot path reads configs on hosts without torch.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..bounds import Bound
from ..errors import ConfigError

INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"

T = TypeVar("T")

Fields = dict[str, tuple[Node, Node]]   # key -> (key node, value node)


@dataclass(frozen=True)
class At(Generic[T]):
    """A value and the line it came from, so checks made after merging defaults still name the line."""

    value: T
    line: int


def line_of(node: Node) -> int:
    return int(node.start_mark.line) + 1


def did_you_mean(word: str, choices: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """A suggestion suffix for an unknown word: an alias's target, the closest choice, or the whole list."""
    choices = sorted(choices)
    close = [aliases[word]] if aliases and word in aliases else difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else f" (expected one of: {', '.join(choices)})"


def describe(node: Node) -> str:
    """How a value reads in a message: strings quoted, containers named."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == NULL_TAG:
        return "nothing"
    return repr(node.value) if node.tag == STR_TAG else str(node.value)


class NodeReader:
    """Reads typed values out of YAML nodes; every check raises ConfigError at the offending node's line."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._constructor = SafeConstructor()
        self._mappings: dict[int, Fields] = {}   # by node id: an aliased (*x) mapping is read twice

    def error(self, at: Node | int, message: str) -> ConfigError:
        line = at if isinstance(at, int) else line_of(at)
        return ConfigError(f"{self.source}:{line}: {message}", path=self.source)

    def compose(self, text: str) -> Node:
        """The document's root node; syntax errors and an empty document are ConfigErrors."""
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = int(mark.line) + 1 if mark else 1
            raise self.error(line, f"invalid YAML: {', '.join(p for p in (e.context, e.problem) if p)}") from None
        except yaml.reader.ReaderError as e:
            raise self.error(text.count("\n", 0, e.position) + 1, f"invalid YAML: {e.reason}") from None
        if root is None:
            raise self.error(1, "the config is empty (expected a mapping with 'version' and 'models')")
        return root

    # --- containers --------------------------------------------------------------------------------

    def mapping(self, node: Node, what: str) -> Fields:
        if not isinstance(node, MappingNode):
            raise self.error(node, f"{what} must be a mapping, got {describe(node)}")
        if id(node) in self._mappings:   # an aliased (*x) mapping, flattened already: its keys now repeat
            return self._mappings[id(node)]
        seen: dict[str, Node] = {}
        for key, _ in node.value:   # explicit keys only: a key merged in by `<<` may legitimately repeat
            name = self.key(key, what)
            if name in seen:
                raise self.error(key, f"duplicate key {name!r} in {what} (first at line {line_of(seen[name])})")
            seen[name] = key
        try:
            self._constructor.flatten_mapping(node)   # resolves `<<: *x`, putting merged pairs first
        except yaml.MarkedYAMLError as e:
            raise self.error(e.problem_mark.line + 1 if e.problem_mark else line_of(node), str(e.problem)) from None
        fields = {self.key(k, what): (k, v) for k, v in node.value}   # later pairs win: explicit over merged
        self._mappings[id(node)] = fields
        return fields

    def key(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or node.tag not in (STR_TAG, _MERGE_TAG):
            raise self.error(node, f"keys in {what} must be plain names, got {describe(node)}")
        return str(node.value)

    def known_keys(self, fields: Fields, allowed: Sequence[str], what: str) -> None:
        for name, (key, _) in fields.items():
            if name not in allowed:
                raise self.error(key, f"unknown key {name!r} in {what}{did_you_mean(name, allowed)}")

    def section(self, top: Fields, name: str, allowed: Sequence[str]) -> Fields:
        """An optional mapping-valued key; absent or empty (`name:`) means no settings."""
        if name not in top or top[name][1].tag == NULL_TAG:
            return {}
        fields = self.mapping(top[name][1], name)
        self.known_keys(fields, allowed, name)
        return fields

    def items(self, node: Node, what: str) -> list[Node]:
        """A matrix list; a single scalar counts as a one-item list. Empty lists are an error."""
        if isinstance(node, SequenceNode):
            if not node.value:
                raise self.error(node, f"empty matrix: {what} is an empty list")
            return list(node.value)
        if isinstance(node, ScalarNode):
            if node.tag == NULL_TAG:
                raise self.error(node, f"empty matrix: {what} has no values")
            return [node]
        raise self.error(node, f"{what} must be a list, got {describe(node)}")

    def unique(self, seen: list[At[T]], new: At[T], what: str) -> None:
        """Appends `new` to `seen`, refusing a value already there (naming the first one's line)."""
        for old in seen:
            if old.value == new.value:
                raise self.error(new.line, f"duplicate value {new.value!r} in {what} (first at line {old.line})")
        seen.append(new)

    def names(self, node: Node, what: str, kind: str, known: Iterable[str],
              aliases: Mapping[str, str] | None = None) -> tuple[At[str], ...]:
        """A list of distinct names, each one of `known` (`aliases` maps other spellings to suggestions)."""
        known = sorted(known)
        out: list[At[str]] = []
        for item in self.items(node, what):
            name = self.string(item, f"a {kind} in {what}")
            if name not in known:
                raise self.error(item, f"unknown {kind} {name!r}{did_you_mean(name, known, aliases)}")
            self.unique(out, At(name, line_of(item)), what)
        return tuple(out)

    # --- scalars -----------------------------------------------------------------------------------

    def scalar(self, node: Node) -> object:
        if not isinstance(node, ScalarNode):
            return node   # callers compare types, so a non-scalar fails their check
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            raise self.error(node, f"bad value {node.value!r}: {e.problem}") from None

    def string(self, node: Node, what: str) -> str:
        value = self.scalar(node)
        if not isinstance(value, str) or not value:
            raise self.error(node, f"{what} must be a non-empty string, got {describe(node)}")
        return value

    def source_text(self, node: Node, what: str) -> str:
        """A scalar as written: a sha like 0123456 must not be read as an octal number."""
        if not isinstance(node, ScalarNode) or node.tag not in (STR_TAG, INT_TAG, FLOAT_TAG):
            raise self.error(node, f"{what} must be a string, got {describe(node)}")
        return str(node.value)

    def matching(self, node: Node, what: str, pattern: re.Pattern[str], expected: str) -> str:
        value = self.string(node, what)
        if not pattern.fullmatch(value):
            raise self.error(node, f"{what} {value!r} is not {expected}")
        return value

    def integer(self, node: Node, what: str, minimum: int = 1, bound: Bound | None = None) -> int:
        value = self.scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(node, f"{what} must be an integer, got {describe(node)}")
        if value < minimum:
            raise self.error(node, f"{what} must be at least {minimum}, got {value}")
        return int(self.within(node, what, value, bound))

    def seconds(self, node: Node, what: str, bound: Bound | None = None) -> float:
        value = self.scalar(node)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise self.error(node, f"{what} must be a number of seconds, got {describe(node)}")
        if value <= 0:
            raise self.error(node, f"{what} must be positive, got {value}")
        return float(self.within(node, what, value, bound))

    def within(self, node: Node, what: str, value: float, bound: Bound | None) -> float:
        """`value` inside `bound` (bounds.py, the same ceilings as the flags'), else an error at its line."""
        if bound is None:
            return value
        try:
            return bound.parse(value)
        except ValueError as exc:
            raise self.error(node, f"{what}: {exc}; give {bound.describe()}") from None

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node)
        if not isinstance(value, bool):
            raise self.error(node, f"{what} must be true or false, got {describe(node)}")
        return value

    def plain_value(self, node: Node, what: str) -> str:
        """A string, number or boolean as a string; booleans in YAML's spelling, not Python's."""
        value = self.scalar(node)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float | str) and node.tag != NULL_TAG:
            return str(value)
        raise self.error(node, f"{what} must be a string, number or boolean, got {describe(node)}")
