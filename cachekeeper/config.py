"""The YAML build matrix: parsing and validation with line-precise messages.

CONTRACT (other modules rely on these names):
    load_config(path) -> Config           raises ConfigError("FILE:LINE: message") on any bad input
    parse_config(text, source) -> Config
    Config.entries(backends=None, models=None) -> list[PlannedEntry]   (the expanded matrix, pure)
    Config.model_line(name), Config.require_model_paths(), Config.options_for(backend)

The file is read with `yaml.compose` rather than `safe_load` so every value keeps its line: a config
error names the exact line to fix. This module stays light (yaml + stdlib): the hydrate boot path imports
it on hosts without torch. Schema reference: docs/config.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .backends import mode_key_options, modes_for, registry
from .backends.base import ModelRef
from .errors import ConfigError
from .spec import OFFLOADS, WARMUPS, EntrySpec, Shape, default_warmup, warmup_options

CONFIG_VERSION = 1
DTYPES = ("bfloat16", "float16", "float32")
INPUT_BUILDERS = ("auto", "flux", "flux2", "sd3", "unet")
LATENT_MULTIPLE = 8          # diffusers VAEs downsample by 8: other heights/widths fail or get cropped
DEFAULT_MODES = ("full",)    # every backend supports it
DEFAULT_DTYPES = ("float32",)

_TOP_KEYS = ("version", "store", "catalog", "build", "hydrate", "defaults", "backend_options", "models")
_BUILD_KEYS = ("timeout", "workers")
_HYDRATE_KEYS = ("deadline", "best_effort")
_MATRIX_KEYS = ("backends", "modes", "dtypes", "shapes")
_MODEL_KEYS = ("name", "path", "hub", "revision", "component", "inputs", "pipeline", "tensor_parallel",
               "guidance", "warmup", "max_sequence_length", "offload", *_MATRIX_KEYS)
# Backends whose runtimes cannot run a pipeline with CPU offload (their graphs live on the device).
_NO_OFFLOAD = ("neuron", "neuron_xla")
_SHAPE_KEYS = ("height", "width", "batch")
# Spellings people bring from other tools; suggested, never accepted, so keys have one spelling.
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "bf16": "bfloat16"}

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")       # used in labels and CLI filters
_COMPONENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")            # a pipeline attribute name
_HUB_RE = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
_INPUTS_RE = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_SHAPE_RE = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")
_DB_URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9]*)(?:\+[A-Za-z0-9_]+)?://(.*)")
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"

_T = TypeVar("_T")


# --- public model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelMatrix:
    """One model and the matrix it is built for (top-level defaults merged with per-model overrides)."""

    model: ModelRef
    backends: tuple[str, ...]                    # sorted
    modes: tuple[str, ...]                       # sorted union over backends; see modes_for
    dtypes: tuple[str, ...]                      # sorted
    shapes: tuple[Shape, ...]                    # sorted, as written: entries() doubles batch under guidance
    guidance: bool = False                       # classifier-free guidance: compiled batch = 2 x batch
    backend_modes: tuple[tuple[str, tuple[str, ...]], ...] = ()   # per-backend modes (mapping form)
    line: int = 0                                # line of the model's name in the config
    path_line: int = 0                           # line of its `path` (local models)

    def modes_for(self, backend: str) -> tuple[str, ...]:
        return dict(self.backend_modes).get(backend, self.modes)

    def compiled_shapes(self) -> tuple[Shape, ...]:
        if not self.guidance:
            return self.shapes
        return tuple(Shape(s.height, s.width, 2 * s.batch) for s in self.shapes)

    def warmup_for(self, mode: str) -> str:
        m = self.model
        return m.warmup or ("pipeline" if m.pipeline else default_warmup(mode))

    def options(self, mode: str = "full") -> tuple[tuple[str, str], ...]:
        """Graph-changing options that go into the entry key (sorted, as EntrySpec wants)."""
        m = self.model
        out = warmup_options(self.warmup_for(mode), guidance=self.guidance,
                             max_sequence_length=m.max_sequence_length, offload=m.offload)
        if m.tensor_parallel > 1:
            out["tp"] = str(m.tensor_parallel)
        out.update(mode_key_options(mode))
        return tuple(sorted(out.items()))

    def entries(self) -> list[PlannedEntry]:
        """backend, mode, dtype, shape: each sorted, so the order is the same in every process."""
        m = self.model
        return [
            PlannedEntry(EntrySpec(model=m.name, component=m.component, backend=backend, mode=mode, shape=shape,
                                   dtype=dtype, revision=m.revision, options=self.options(mode)),
                         m)
            for backend in sorted(self.backends)
            for mode in sorted(self.modes_for(backend))
            for dtype in sorted(self.dtypes)
            for shape in sorted(self.compiled_shapes())
        ]


@dataclass(frozen=True)
class PlannedEntry:
    spec: EntrySpec
    model: ModelRef


@dataclass(frozen=True)
class Config:
    source: str                                   # file path (for messages)
    models: tuple[ModelMatrix, ...]
    backend_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    store: str | None = None                      # absolute file:// URL, s3:// or gs://
    catalog: str | None = None                    # SQLAlchemy URL; sqlite paths made absolute
    build_timeout: float = 1800.0
    build_workers: int = 1
    hydrate_deadline: float | None = None         # seconds for a whole hydrate (--deadline wins)
    hydrate_best_effort: bool = False

    def entries(self, backends: Collection[str] | None = None,
                models: Collection[str] | None = None) -> list[PlannedEntry]:
        """The expanded matrix: models in file order, then backend, mode, dtype, shape sorted."""
        want_backends = self._check_filter("backend", backends, self.backend_names())
        want_models = self._check_filter("model", models, self.model_names())
        return [e for m in self.models if want_models is None or m.model.name in want_models
                for e in m.entries() if want_backends is None or e.spec.backend in want_backends]

    def options_for(self, backend: str) -> dict[str, str]:
        return dict(self.backend_options.get(backend, {}))

    def model_names(self) -> list[str]:
        return [m.model.name for m in self.models]

    def backend_names(self) -> list[str]:
        return sorted({b for m in self.models for b in m.backends})

    def model(self, name: str) -> ModelMatrix:
        for m in self.models:
            if m.model.name == name:
                return m
        raise ConfigError(f"{self.source}: no model named {name!r} (models: {', '.join(self.model_names())})")

    def model_line(self, name: str) -> int:
        """Where the model is declared, so later failures (a build, a missing folder) can point at it."""
        return self.model(name).line

    def require_model_paths(self, models: Collection[str] | None = None) -> None:
        """Local model folders must exist. Prebuild calls this; hydrate does not (boot hosts lack models)."""
        wanted = self._check_filter("model", models, self.model_names())
        for m in self.models:
            path = m.model.path
            if path is None or (wanted is not None and m.model.name not in wanted):
                continue
            if not Path(path).is_dir():
                what = "is not a directory" if Path(path).exists() else "does not exist"
                raise ConfigError(f"{self.source}:{m.path_line}: model {m.model.name!r} path {path} {what}")

    def _check_filter(self, kind: str, wanted: Collection[str] | None, known: Sequence[str]) -> frozenset[str] | None:
        """The filter as a set (None: everything); a bare string is one name, not its characters."""
        if wanted is None:
            return None
        names = frozenset([wanted] if isinstance(wanted, str) else wanted)
        unknown = sorted(names - set(known))
        if unknown:
            raise ConfigError(f"{self.source}: unknown {kind} {', '.join(map(repr, unknown))} "
                              f"(the config has: {', '.join(known)})")
        return names


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; relative paths in it resolve against its directory."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}") from None
    return parse_config(text, str(path), base_dir=Path(path).parent)


def parse_config(text: str, source: str = "<config>", base_dir: str | Path | None = None) -> Config:
    """Validate `text`. Relative paths resolve against base_dir, else source's directory, else the cwd."""
    if base_dir is None:
        base_dir = Path.cwd() if source.startswith("<") else Path(source).parent
    return _Parser(source, Path(os.path.abspath(base_dir))).config(text)


# --- internals ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _At(Generic[_T]):
    """A value and the line it came from, so checks made after merging defaults still name the line."""

    value: _T
    line: int


@dataclass(frozen=True)
class _Modes:
    line: int
    shared: tuple[_At[str], ...] = ()                                # list form: for every backend
    by_backend: Mapping[str, tuple[_At[str], ...]] | None = None     # mapping form: backend -> modes


@dataclass(frozen=True)
class _Matrix:
    backends: tuple[_At[str], ...] | None = None
    modes: _Modes | None = None
    dtypes: tuple[_At[str], ...] | None = None
    shapes: tuple[_At[Shape], ...] | None = None

    def over(self, base: _Matrix) -> _Matrix:
        """Per-model values replace (not extend) the defaults."""
        return _Matrix(
            self.backends if self.backends is not None else base.backends,
            self.modes if self.modes is not None else base.modes,
            self.dtypes if self.dtypes is not None else base.dtypes,
            self.shapes if self.shapes is not None else base.shapes,
        )


_Fields = dict[str, tuple[Node, Node]]   # key -> (key node, value node)


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _did_you_mean(word: str, choices: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    choices = sorted(choices)
    close = [aliases[word]] if aliases and word in aliases else difflib.get_close_matches(word, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else f" (expected one of: {', '.join(choices)})"


def _describe(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if node.tag == _NULL_TAG:
        return "nothing"
    return repr(node.value) if node.tag == _STR_TAG else str(node.value)


def _local_path(raw: str, base: Path) -> str:
    path = Path(os.path.expanduser(raw))
    return os.path.normpath(path if path.is_absolute() else base / path)


def _size_problem(value: int, name: str) -> str | None:
    if value <= 0:
        return f"{name} must be positive, got {value}"
    if name != "batch" and value % LATENT_MULTIPLE:
        return f"{name} {value} is not a multiple of {LATENT_MULTIPLE} (diffusers latents need it)"
    return None


class _Parser:
    """Walks the composed YAML tree; every check raises ConfigError at the offending node's line."""

    def __init__(self, source: str, base: Path) -> None:
        self.source = source
        self.base = base
        self._constructor = SafeConstructor()
        self._mappings: dict[int, _Fields] = {}   # by node id: an aliased (*x) mapping is read twice

    def error(self, at: Node | int, message: str) -> ConfigError:
        line = at if isinstance(at, int) else _line(at)
        return ConfigError(f"{self.source}:{line}: {message}")

    # --- whole document ----------------------------------------------------------------------------

    def config(self, text: str) -> Config:
        root = self.compose(text)
        top = self.mapping(root, "the top level")
        self.version(top, root)
        self.known_keys(top, _TOP_KEYS, "the top level")
        build = self.section(top, "build", _BUILD_KEYS)
        hydrate = self.section(top, "hydrate", _HYDRATE_KEYS)
        settings = Config(
            source=self.source,
            models=(),
            backend_options=self.backend_options(top),
            store=self.store(top["store"][1]) if "store" in top else None,
            catalog=self.catalog(top["catalog"][1]) if "catalog" in top else None,
            build_timeout=self.timeout(build["timeout"][1]) if "timeout" in build else 1800.0,
            build_workers=self.integer(build["workers"][1], "build.workers") if "workers" in build else 1,
            hydrate_deadline=(self.timeout(hydrate["deadline"][1], "hydrate.deadline")
                              if "deadline" in hydrate else None),
            hydrate_best_effort=(self.boolean(hydrate["best_effort"][1], "hydrate.best_effort")
                                 if "best_effort" in hydrate else False),
        )
        defaults = self.matrix(self.section(top, "defaults", _MATRIX_KEYS), "defaults.")
        if "models" not in top:
            raise self.error(root, "missing required key 'models' (a list of models to build)")
        return dataclasses.replace(settings, models=self.models(top["models"][1], defaults))

    def compose(self, text: str) -> Node:
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

    def version(self, top: _Fields, root: Node) -> None:
        if "version" not in top:
            raise self.error(root, f"missing required key 'version' (add `version: {CONFIG_VERSION}`)")
        node = top["version"][1]
        if self.scalar(node) != CONFIG_VERSION or node.tag != _INT_TAG:
            raise self.error(node, f"unsupported config version {_describe(node)} "
                                   f"(this cachekeeper reads version {CONFIG_VERSION})")

    # --- generic node readers ----------------------------------------------------------------------

    def mapping(self, node: Node, what: str) -> _Fields:
        if not isinstance(node, MappingNode):
            raise self.error(node, f"{what} must be a mapping, got {_describe(node)}")
        if id(node) in self._mappings:   # an aliased (*x) mapping, flattened already: its keys now repeat
            return self._mappings[id(node)]
        seen: dict[str, Node] = {}
        for key, _ in node.value:   # explicit keys only: a key merged in by `<<` may legitimately repeat
            name = self.key(key, what)
            if name in seen:
                raise self.error(key, f"duplicate key {name!r} in {what} (first at line {_line(seen[name])})")
            seen[name] = key
        try:
            self._constructor.flatten_mapping(node)   # resolves `<<: *x`, putting merged pairs first
        except yaml.MarkedYAMLError as e:
            raise self.error(e.problem_mark.line + 1 if e.problem_mark else _line(node), str(e.problem)) from None
        fields = {self.key(k, what): (k, v) for k, v in node.value}   # later pairs win: explicit over merged
        self._mappings[id(node)] = fields
        return fields

    def key(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or node.tag not in (_STR_TAG, "tag:yaml.org,2002:merge"):
            raise self.error(node, f"keys in {what} must be plain names, got {_describe(node)}")
        return str(node.value)

    def known_keys(self, fields: _Fields, allowed: Sequence[str], what: str) -> None:
        for name, (key, _) in fields.items():
            if name not in allowed:
                raise self.error(key, f"unknown key {name!r} in {what}{_did_you_mean(name, allowed)}")

    def section(self, top: _Fields, name: str, allowed: Sequence[str]) -> _Fields:
        """An optional mapping-valued key; absent or empty (`name:`) means no settings."""
        if name not in top or top[name][1].tag == _NULL_TAG:
            return {}
        fields = self.mapping(top[name][1], name)
        self.known_keys(fields, allowed, name)
        return fields

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
            raise self.error(node, f"{what} must be a non-empty string, got {_describe(node)}")
        return value

    def matching(self, node: Node, what: str, pattern: re.Pattern[str], expected: str) -> str:
        value = self.string(node, what)
        if not pattern.fullmatch(value):
            raise self.error(node, f"{what} {value!r} is not {expected}")
        return value

    def integer(self, node: Node, what: str, minimum: int = 1) -> int:
        value = self.scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(node, f"{what} must be an integer, got {_describe(node)}")
        if value < minimum:
            raise self.error(node, f"{what} must be at least {minimum}, got {value}")
        return value

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node)
        if not isinstance(value, bool):
            raise self.error(node, f"{what} must be true or false, got {_describe(node)}")
        return value

    def items(self, node: Node, what: str) -> list[Node]:
        """A matrix list; a single scalar counts as a one-item list. Empty lists are an error."""
        if isinstance(node, SequenceNode):
            if not node.value:
                raise self.error(node, f"empty matrix: {what} is an empty list")
            return list(node.value)
        if isinstance(node, ScalarNode):
            if node.tag == _NULL_TAG:
                raise self.error(node, f"empty matrix: {what} has no values")
            return [node]
        raise self.error(node, f"{what} must be a list, got {_describe(node)}")

    # --- top-level values --------------------------------------------------------------------------

    def store(self, node: Node) -> str:
        url = self.string(node, "store")
        scheme, sep, rest = url.partition("://")
        if not sep:
            return "file://" + _local_path(url, self.base)
        if scheme == "file":
            return "file://" + _local_path(rest, self.base)
        if scheme in ("s3", "gs"):
            if not rest.split("/")[0]:
                raise self.error(node, f"store {url!r} names no bucket (use {scheme}://bucket/prefix)")
            return url
        raise self.error(node, f"unsupported store URL scheme {scheme!r} (use file://, s3:// or gs://)")

    def catalog(self, node: Node) -> str:
        url = self.string(node, "catalog")
        match = _DB_URL_RE.fullmatch(url)
        if not match:
            raise self.error(node, f"catalog {url!r} is not a database URL "
                                   "(e.g. sqlite:///catalog.db or postgresql+psycopg://host/db)")
        rest = match.group(2)
        if match.group(1).lower() != "sqlite" or not rest.startswith("/"):
            return url
        path, query_sep, query = rest[1:].partition("?")
        if path in ("", ":memory:") or path.startswith("file:"):
            return url
        # sqlite:///rel is relative to the cwd in SQLAlchemy; pin it to the config's directory
        return url[: len(url) - len(rest)] + "/" + _local_path(path, self.base) + query_sep + query

    def timeout(self, node: Node, what: str = "build.timeout") -> float:
        value = self.scalar(node)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise self.error(node, f"{what} must be a number of seconds, got {_describe(node)}")
        if value <= 0:
            raise self.error(node, f"{what} must be positive, got {value}")
        return float(value)

    def backend_options(self, top: _Fields) -> dict[str, dict[str, str]]:
        """backend -> {option: value} as strings: they feed the toolchain fingerprint, not entry keys."""
        out: dict[str, dict[str, str]] = {}
        for backend, (_, value) in self.section(top, "backend_options", list(registry())).items():
            options = {} if value.tag == _NULL_TAG else self.mapping(value, f"backend_options.{backend}")
            out[backend] = {name: self.option(v, f"backend_options.{backend}.{name}")
                            for name, (_, v) in options.items()}
        return out

    def option(self, node: Node, what: str) -> str:
        value = self.scalar(node)
        if isinstance(value, bool):
            return "true" if value else "false"   # YAML spelling, not Python's
        if isinstance(value, int | float | str) and node.tag != _NULL_TAG:
            return str(value)
        raise self.error(node, f"{what} must be a string, number or boolean, got {_describe(node)}")

    # --- matrix ------------------------------------------------------------------------------------

    def matrix(self, fields: _Fields, prefix: str) -> _Matrix:
        """The matrix keys of `defaults` or of one model; prefix names it in messages."""
        return _Matrix(
            backends=self.names(fields["backends"][1], f"{prefix}backends", "backend", registry())
            if "backends" in fields else None,
            modes=self.modes(*fields["modes"], f"{prefix}modes") if "modes" in fields else None,
            dtypes=self.names(fields["dtypes"][1], f"{prefix}dtypes", "dtype", DTYPES, _DTYPE_ALIASES)
            if "dtypes" in fields else None,
            shapes=self.shapes(fields["shapes"][1], f"{prefix}shapes") if "shapes" in fields else None,
        )

    def names(self, node: Node, what: str, kind: str, known: Iterable[str],
              aliases: Mapping[str, str] | None = None) -> tuple[_At[str], ...]:
        known = sorted(known)
        out: list[_At[str]] = []
        for item in self.items(node, what):
            name = self.string(item, f"a {kind} in {what}")
            if name not in known:
                raise self.error(item, f"unknown {kind} {name!r}{_did_you_mean(name, known, aliases)}")
            self.unique(out, _At(name, _line(item)), what)
        return tuple(out)

    def unique(self, seen: list[_At[_T]], new: _At[_T], what: str) -> None:
        for old in seen:
            if old.value == new.value:
                raise self.error(new.line, f"duplicate value {new.value!r} in {what} (first at line {old.line})")
        seen.append(new)

    def modes(self, key: Node, node: Node, what: str) -> _Modes:
        """A list (every backend) or a mapping backend -> list, for matrices mixing e.g. neuron eager."""
        every = sorted({m for name in registry() for m in modes_for(name)})
        if not isinstance(node, MappingNode):
            return _Modes(_line(key), shared=self.names(node, what, "mode", every))
        fields = self.mapping(node, what)
        self.known_keys(fields, list(registry()), what)
        by_backend = {backend: self.names(v, f"{what}.{backend}", "mode", every) for backend, (_, v) in fields.items()}
        for backend, modes in by_backend.items():
            self.supported(modes, backend, what)
        return _Modes(_line(key), by_backend=by_backend)

    def supported(self, modes: Iterable[_At[str]], backend: str, context: str) -> None:
        supported = modes_for(backend)
        for mode in modes:
            if mode.value not in supported:
                raise self.error(mode.line, f"mode {mode.value!r} is not supported by backend {backend!r} "
                                            f"({context}; supported: {', '.join(supported)})")

    def shapes(self, node: Node, what: str) -> tuple[_At[Shape], ...]:
        if isinstance(node, MappingNode):
            return self.shape_product(node, what)
        out: list[_At[Shape]] = []
        for item in self.items(node, what):
            self.unique(out, _At(self.shape(item, what), _line(item)), what)
        return tuple(out)

    def shape_product(self, node: MappingNode, what: str) -> tuple[_At[Shape], ...]:
        fields = self.mapping(node, what)
        self.known_keys(fields, _SHAPE_KEYS, what)
        for required in ("height", "width"):
            if required not in fields:
                raise self.error(node, f"{what} is missing {required!r}")
        sizes: dict[str, list[int]] = {"batch": [1]}
        for name, (_, value) in fields.items():
            seen: list[_At[int]] = []
            for item in self.items(value, f"{what}.{name}"):
                self.unique(seen, _At(self.size(item, name), _line(item)), f"{what}.{name}")
            sizes[name] = [s.value for s in seen]
        return tuple(_At(Shape(h, w, b), _line(node))
                     for h in sizes["height"] for w in sizes["width"] for b in sizes["batch"])

    def shape(self, node: Node, what: str) -> Shape:
        """One explicit shape: {height, width, batch} or "HxW" / "HxWxB"."""
        if isinstance(node, MappingNode):
            fields = self.mapping(node, f"a shape in {what}")
            self.known_keys(fields, _SHAPE_KEYS, f"a shape in {what}")
            for required in ("height", "width"):
                if required not in fields:
                    raise self.error(node, f"a shape in {what} is missing {required!r}")
            sizes = {name: self.size(v, name) for name, (_, v) in fields.items()}
            return Shape(sizes["height"], sizes["width"], sizes.get("batch", 1))
        value = self.scalar(node)
        match = _SHAPE_RE.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise self.error(node, f"a shape in {what} must be {{height, width, batch}} or 'HxWxB', "
                                   f"got {_describe(node)}")
        height, width, batch = (int(g) if g else 1 for g in match.groups())
        for name, size in (("height", height), ("width", width), ("batch", batch)):
            problem = _size_problem(size, name)
            if problem:
                raise self.error(node, f"shape {value!r}: {problem}")
        return Shape(height, width, batch)

    def size(self, node: Node, name: str) -> int:
        value = self.scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(node, f"{name} must be a positive integer, got {_describe(node)}")
        problem = _size_problem(value, name)
        if problem:
            raise self.error(node, problem)
        return value

    # --- models ------------------------------------------------------------------------------------

    def models(self, node: Node, defaults: _Matrix) -> tuple[ModelMatrix, ...]:
        if not isinstance(node, SequenceNode):
            raise self.error(node, f"models must be a list of models, got {_describe(node)}")
        if not node.value:
            raise self.error(node, "models is an empty list: nothing to build")
        out: list[ModelMatrix] = []
        for item in node.value:
            model = self.model(item, defaults)
            for other in out:
                if other.model.name == model.model.name:
                    raise self.error(model.line, f"duplicate model name {model.model.name!r} "
                                                 f"(first at line {other.line})")
            out.append(model)
        return tuple(out)

    def model(self, node: Node, defaults: _Matrix) -> ModelMatrix:
        fields = self.mapping(node, "a model")
        if "name" not in fields:
            self.known_keys(fields, _MODEL_KEYS, "a model")   # a misspelt `name` gets its suggestion
            raise self.error(node, "a model is missing required key 'name'")
        name_node = fields["name"][1]
        name = self.matching(name_node, "model name", _NAME_RE, "a valid name (letters, digits, '.', '_', '-')")
        where = f"model {name!r}"
        self.known_keys(fields, _MODEL_KEYS, where)
        path, hub, revision = self.source_of(node, fields, where)
        ref = ModelRef(
            name=name,
            component=self.matching(fields["component"][1], f"{where} component", _COMPONENT_RE,
                                    "a pipeline attribute name") if "component" in fields else "transformer",
            path=path, hub=hub, revision=revision,
            inputs=self.inputs(fields["inputs"][1], where) if "inputs" in fields else "auto",
            pipeline=self.boolean(fields["pipeline"][1], f"{where} pipeline") if "pipeline" in fields else False,
            tensor_parallel=self.integer(fields["tensor_parallel"][1], f"{where} tensor_parallel")
            if "tensor_parallel" in fields else 1,
            guidance=self.boolean(fields["guidance"][1], f"{where} guidance") if "guidance" in fields else False,
        )
        warmup, max_len, offload = self.warmup_fields(fields, where)
        ref = dataclasses.replace(ref, warmup=warmup, max_sequence_length=max_len, offload=offload)
        matrix = self.matrix(fields, f"{where} ").over(defaults)
        backends, backend_modes, dtypes, shapes = self.resolve(matrix, name, _line(name_node))
        self.check_offload(fields, ref, backends, where)
        return ModelMatrix(
            model=ref, backends=backends, modes=tuple(sorted({m for _, ms in backend_modes for m in ms})),
            dtypes=dtypes, shapes=shapes, backend_modes=backend_modes,
            guidance=self.boolean(fields["guidance"][1], f"{where} guidance") if "guidance" in fields else False,
            line=_line(name_node), path_line=_line(fields["path"][1]) if "path" in fields else 0,
        )

    def source_of(self, node: Node, fields: _Fields, where: str) -> tuple[str | None, str | None, str]:
        """(absolute path, hub id, revision); a hub model must pin a revision or its keys would lie."""
        revision = self.revision(fields["revision"][1], where) if "revision" in fields else ""
        if "path" in fields and "hub" in fields:
            raise self.error(fields["hub"][0], f"{where} sets both 'path' and 'hub'; keep one")
        if "path" in fields:
            return _local_path(self.string(fields["path"][1], f"{where} path"), self.base), None, revision
        if "hub" not in fields:
            raise self.error(node, f"{where} needs 'path' (a local diffusers folder) or 'hub' (org/repo)")
        hub = self.matching(fields["hub"][1], f"{where} hub", _HUB_RE, "a hub repo id (org/repo)")
        if not revision:
            at = fields["revision"][1] if "revision" in fields else fields["hub"][0]
            raise self.error(at, f"{where} from the hub needs a revision (a commit sha or tag) so its keys pin "
                                 "the weights")
        return None, hub, revision

    def warmup_fields(self, fields: _Fields, where: str) -> tuple[str, int, str]:
        """(warmup, max_sequence_length, offload): how the build calls the pipeline; "" / 0 when unset."""
        chosen = {key: self.choice(fields, key, allowed, where) for key, allowed in (("warmup", WARMUPS),
                                                                                     ("offload", OFFLOADS))}
        max_len = self.integer(fields["max_sequence_length"][1], f"{where} max_sequence_length") \
            if "max_sequence_length" in fields else 0
        return chosen["warmup"], max_len, chosen["offload"]

    def choice(self, fields: _Fields, key: str, allowed: tuple[str, ...], where: str) -> str:
        if key not in fields:
            return ""
        value = self.string(fields[key][1], f"{where} {key}")
        if value not in allowed:
            raise self.error(fields[key][1], f"{where} {key} must be {' or '.join(allowed)}, not {value!r}"
                                             f"{_did_you_mean(value, allowed)}")
        return value

    def check_offload(self, fields: _Fields, ref: ModelRef, backends: Sequence[str], where: str) -> None:
        if not ref.offload:
            return
        at = fields["offload"][1]
        if ref.warmup == "component":
            raise self.error(at, f"{where} offload applies to a pipeline warm-up; set warmup: pipeline or drop offload")
        for backend in backends:
            if backend in _NO_OFFLOAD:
                raise self.error(at, f"{where} offload: backend {backend!r} cannot offload to the CPU "
                                     f"(its graphs run on the device); drop offload or the {backend} backend")

    def revision(self, node: Node, where: str) -> str:
        # the source text, so a sha like 0123456 is not read as an octal number
        if not isinstance(node, ScalarNode) or node.tag not in (_STR_TAG, _INT_TAG, _FLOAT_TAG):
            raise self.error(node, f"{where} revision must be a string, got {_describe(node)}")
        return str(node.value)

    def inputs(self, node: Node, where: str) -> str:
        value = self.string(node, f"{where} inputs")
        if value not in INPUT_BUILDERS and not _INPUTS_RE.fullmatch(value):
            raise self.error(node, f"{where} inputs {value!r} is neither a builder nor 'package.module:function'"
                                   f"{_did_you_mean(value, INPUT_BUILDERS)}")
        return value

    def resolve(self, matrix: _Matrix, name: str, line: int) -> tuple[
            tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...], tuple[Shape, ...]]:
        """Merged matrix -> sorted (backends, per-backend modes, dtypes, shapes); checks mode support."""
        if matrix.backends is None:
            raise self.missing("backends", name, line)
        if matrix.shapes is None:
            raise self.missing("shapes", name, line)
        modes = matrix.modes or _Modes(line, shared=tuple(_At(m, line) for m in DEFAULT_MODES))
        backend_modes = tuple((b.value, self.modes_for(modes, b.value, name))
                              for b in sorted(matrix.backends, key=lambda b: b.value))
        dtypes = matrix.dtypes or tuple(_At(d, line) for d in DEFAULT_DTYPES)
        return (tuple(b for b, _ in backend_modes), backend_modes, tuple(sorted(d.value for d in dtypes)),
                tuple(sorted(s.value for s in matrix.shapes)))

    def missing(self, key: str, model: str, line: int) -> ConfigError:
        return self.error(line, f"model {model!r} has no {key}; set defaults.{key} or {key} on the model")

    def modes_for(self, modes: _Modes, backend: str, model: str) -> tuple[str, ...]:
        chosen = modes.shared if modes.by_backend is None else modes.by_backend.get(backend)
        if chosen is None:
            raise self.error(modes.line, f"modes for model {model!r} list no modes for backend {backend!r}")
        self.supported(chosen, backend, f"model {model!r}")
        return tuple(sorted(m.value for m in chosen))
