"""The config schema: which keys exist, their types and defaults, and how they combine into a Config.

Every check raises ConfigError("FILE:LINE: message") at the offending value (config/reader.py keeps the
lines). Reference: docs/config.md. Light (yaml + stdlib + the backend registry): hydrate reads configs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..backends import can_offload, compile_modes_for, modes_for, registry
from ..bounds import BUILD_TIMEOUT, COUNT, SIZE, WORKERS, bytes_problem, parse_bytes
from ..errors import ConfigError, UsageError
from ..format.spec import DEFAULT_COMPILE_MODE, OFFLOADS, WARMUPS, ModelRef, Shape
from ..stores.schemes import parse_store_url
from ..stores.url import local_path
from .hydrate import HydrateOptions, Spec, config_keys, spec_of
from .model import Config, ModelMatrix
from .reader import INT_TAG, NULL_TAG, STR_TAG, At, Fields, NodeReader, describe, did_you_mean, line_of

CONFIG_VERSION = 1
DTYPES = ("bfloat16", "float16", "float32")
INPUT_BUILDERS = ("auto", "flux", "flux2", "sd3", "unet")   # "auto" + backends/warmup.BUILDERS (tested)
LATENT_MULTIPLE = 8          # diffusers VAEs downsample by 8: other heights/widths fail or get cropped
DEFAULT_MODES = ("full",)    # every backend supports it
DEFAULT_DTYPES = ("float32",)
DEFAULT_BUILD_TIMEOUT = 1800.0

_TOP_KEYS = ("version", "store", "catalog", "build", "hydrate", "capture", "strict", "defaults", "backend_options",
             "models")
# `capture: publish` lets serving hosts write captured sets (`capture --publish`); the default, `report`,
# leaves runtime misses to miss reports (report -> suggest -> builder). Not "off": YAML reads that as false.
CAPTURE_MODES = ("report", "publish")
# `strict:` the serving processes' strict mode (cachekeeper.runtime.strict): CACHEKEEPER_STRICT and a call of
# strict() go over it. Read as written, so `off` (a YAML boolean) is "off", and `yes` or `on` are refused.
STRICT_MODES = ("off", "report", "fail")
_BOOL_TAG = "tag:yaml.org,2002:bool"
_BUILD_KEYS = ("timeout", "workers")
_HYDRATE_KEYS = config_keys()   # the HydrateOptions fields the config sets (config/hydrate.py)
MAX_COUNT = int(COUNT.high)
_MATRIX_KEYS = ("backends", "modes", "compile_modes", "dtypes", "shapes")
_MODEL_KEYS = ("name", "path", "hub", "revision", "component", "inputs", "tensor_parallel",
               "guidance", "warmup", "max_sequence_length", "offload", "priority", *_MATRIX_KEYS)
_SHAPE_KEYS = ("height", "width", "batch")
# Spellings people bring from other tools; suggested, never accepted, so keys have one spelling.
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "bf16": "bfloat16"}

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")       # used in labels and CLI filters
_COMPONENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")            # a pipeline attribute name
_HUB_RE = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
_INPUTS_RE = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_SHAPE_RE = re.compile(r"(\d+)x(\d+)(?:x(\d+))?")


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; relative paths in it resolve against its directory."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text", path=str(path)) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}", path=str(path)) from None
    return parse_config(text, str(path), base_dir=Path(path).parent)


def parse_config(text: str, source: str = "<config>", base_dir: str | Path | None = None) -> Config:
    """Validate `text`. Relative paths resolve against base_dir, else source's directory, else the cwd."""
    if base_dir is None:
        base_dir = Path.cwd() if source.startswith("<") else Path(source).parent
    return _Schema(source, Path(os.path.abspath(base_dir))).config(text)


# --- the matrix before defaults are merged ----------------------------------------------------------


@dataclass(frozen=True)
class _Modes:
    line: int
    shared: tuple[At[str], ...] = ()                                # list form: for every backend
    by_backend: Mapping[str, tuple[At[str], ...]] | None = None     # mapping form: backend -> modes


@dataclass(frozen=True)
class _Matrix:
    backends: tuple[At[str], ...] | None = None
    modes: _Modes | None = None
    dtypes: tuple[At[str], ...] | None = None
    shapes: tuple[At[Shape], ...] | None = None
    compile_modes: tuple[At[str], ...] | None = None   # torch.compile modes the server passes

    def over(self, base: _Matrix) -> _Matrix:
        """Per-model values replace (not extend) the defaults."""
        return _Matrix(
            self.backends if self.backends is not None else base.backends,
            self.modes if self.modes is not None else base.modes,
            self.dtypes if self.dtypes is not None else base.dtypes,
            self.shapes if self.shapes is not None else base.shapes,
            self.compile_modes if self.compile_modes is not None else base.compile_modes,
        )


def _size_problem(value: int, name: str) -> str | None:
    if value <= 0:
        return f"{name} must be positive, got {value}"
    if value > SIZE.high:
        return f"{name} {value} is past the bound of {SIZE.high:g}"
    if name != "batch" and value % LATENT_MULTIPLE:
        return f"{name} {value} is not a multiple of {LATENT_MULTIPLE} (diffusers latents need it)"
    return None


def shape_problem(shape: Shape) -> str | None:
    """Why a config would refuse `shape` (`suggest` skips such shapes), or None."""
    for name, size in (("height", shape.height), ("width", shape.width), ("batch", shape.batch)):
        problem = _size_problem(size, name)
        if problem:
            return problem
    return None


class _Schema(NodeReader):
    """Walks the composed YAML tree top-down, checking each key against the schema."""

    def __init__(self, source: str, base: Path) -> None:
        super().__init__(source)
        self.base = base

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
            build_timeout=(self.seconds(build["timeout"][1], "build.timeout", BUILD_TIMEOUT)
                           if "timeout" in build else DEFAULT_BUILD_TIMEOUT),
            build_workers=(self.integer(build["workers"][1], "build.workers", bound=WORKERS)
                           if "workers" in build else 1),
            capture=self.choice(top, "capture", CAPTURE_MODES, "config") or "report",
            strict=self.strict(top["strict"][1]) if "strict" in top else "off",
            hydrate=self.hydrate_options(hydrate),
        )
        defaults = self.matrix(self.section(top, "defaults", _MATRIX_KEYS), "defaults.")
        if "models" not in top:
            raise self.error(root, "missing required key 'models' (a list of models to build)")
        return dataclasses.replace(settings, models=self.models(top["models"][1], defaults))

    def hydrate_options(self, hydrate: Fields) -> HydrateOptions:
        """The `hydrate:` section, each key read as its HydrateOptions field's spec says (config/hydrate.py)."""
        return HydrateOptions(**{key: self.hydrate_setting(hydrate, key, spec_of(key)) for key in hydrate})

    def hydrate_setting(self, hydrate: Fields, key: str, spec: Spec) -> Any:
        node, what = hydrate[key][1], f"hydrate.{key}"
        if spec.kind == "seconds":
            return self.seconds(node, what, spec.bound)
        if spec.kind == "flag":
            return self.boolean(node, what)
        if spec.kind == "path":
            return local_path(self.string(node, what), self.base)
        if spec.kind == "bytes":
            return self.byte_size(node, what)
        if spec.kind == "count":
            assert spec.bound is not None
            return self.bounded(node, what, int(spec.bound.low), int(spec.bound.high))
        if spec.kind == "choice":
            return self.choice(hydrate, key, spec.choices, "hydrate")
        raise AssertionError(f"hydrate.{key}: no config reading for a {spec.kind} setting")

    def byte_size(self, node: Node, what: str) -> int:
        """A byte budget: an integer or a size like `50G`, parsed as the flags and env vars parse it."""
        value = self.scalar(node)
        raw = node.value if isinstance(value, float) else value   # 1.5 as written, not as a float prints
        try:
            return parse_bytes(value if not isinstance(value, float) else node.value)
        except ValueError as exc:
            raise self.error(node, bytes_problem(what, raw, exc)) from None

    def bounded(self, node: Node, what: str, minimum: int, maximum: int) -> int:
        value = self.integer(node, what, minimum)
        if value > maximum:
            raise self.error(node, f"{what} must be at most {maximum}, got {value}")
        return value

    def version(self, top: Fields, root: Node) -> None:
        if "version" not in top:
            raise self.error(root, f"missing required key 'version' (add `version: {CONFIG_VERSION}`)")
        node = top["version"][1]
        if self.scalar(node) != CONFIG_VERSION or node.tag != INT_TAG:
            raise self.error(node, f"unsupported config version {describe(node)} "
                                   f"(this cachekeeper reads version {CONFIG_VERSION})")

    # --- top-level values --------------------------------------------------------------------------

    def store(self, node: Node) -> str:
        """The canonical URL (stores/url.py parses it, as open_store will); file paths made absolute."""
        try:
            return str(parse_store_url(self.string(node, "store"), self.base))
        except UsageError as e:
            raise self.error(node, f"{e.message} ({e.hint})" if e.hint else e.message) from None

    def catalog(self, node: Node) -> str:
        """The URL as catalog/settings.py checks it (a typo's did-you-mean); a relative `sqlite:///` path is
        pinned to the config's directory (in SQLAlchemy it would be relative to the cwd)."""
        from ..catalog.settings import check_url  # only for a config that names a catalog: not on the boot path

        try:
            return check_url(self.string(node, "catalog"), self.base)
        except UsageError as e:
            raise self.error(node, f"{e.message} ({e.hint})" if e.hint else e.message) from None

    def strict(self, node: Node) -> str:
        """`strict: off | report | fail`, as written (YAML reads a bare `off` as false: it means off here)."""
        text = node.value if isinstance(node, ScalarNode) and node.tag in (STR_TAG, _BOOL_TAG) else None
        if not isinstance(text, str) or text.strip().lower() not in STRICT_MODES:
            near = did_you_mean(text, STRICT_MODES) if isinstance(text, str) else ""
            raise self.error(node, f"strict must be {', '.join(STRICT_MODES[:-1])} or {STRICT_MODES[-1]}, "
                                   f"got {describe(node)}{near if near.startswith(';') else ''}")
        return text.strip().lower()

    def backend_options(self, top: Fields) -> dict[str, dict[str, str]]:
        """backend -> {option: value} as strings: they feed the toolchain fingerprint, not entry keys."""
        out: dict[str, dict[str, str]] = {}
        for backend, (_, value) in self.section(top, "backend_options", list(registry())).items():
            options = {} if value.tag == NULL_TAG else self.mapping(value, f"backend_options.{backend}")
            out[backend] = {name: self.plain_value(v, f"backend_options.{backend}.{name}")
                            for name, (_, v) in options.items()}
        return out

    # --- matrix ------------------------------------------------------------------------------------

    def matrix(self, fields: Fields, prefix: str) -> _Matrix:
        """The matrix keys of `defaults` or of one model; prefix names it in messages."""
        return _Matrix(
            backends=self.names(fields["backends"][1], f"{prefix}backends", "backend", registry())
            if "backends" in fields else None,
            modes=self.modes(*fields["modes"], f"{prefix}modes") if "modes" in fields else None,
            dtypes=self.names(fields["dtypes"][1], f"{prefix}dtypes", "dtype", DTYPES, _DTYPE_ALIASES)
            if "dtypes" in fields else None,
            shapes=self.shapes(fields["shapes"][1], f"{prefix}shapes") if "shapes" in fields else None,
            compile_modes=self.names(fields["compile_modes"][1], f"{prefix}compile_modes", "compile mode",
                                     sorted({c for name in registry() for c in compile_modes_for(name)}))
            if "compile_modes" in fields else None,
        )

    def modes(self, key: Node, node: Node, what: str) -> _Modes:
        """A list (every backend) or a mapping backend -> list, for matrices mixing e.g. neuron eager."""
        every = sorted({m for name in registry() for m in modes_for(name)})
        if not isinstance(node, MappingNode):
            return _Modes(line_of(key), shared=self.names(node, what, "mode", every))
        fields = self.mapping(node, what)
        self.known_keys(fields, list(registry()), what)
        by_backend = {backend: self.names(v, f"{what}.{backend}", "mode", every) for backend, (_, v) in fields.items()}
        for backend, modes in by_backend.items():
            self.supported(modes, backend, what)
        return _Modes(line_of(key), by_backend=by_backend)

    def supported(self, modes: Iterable[At[str]], backend: str, context: str) -> None:
        supported = modes_for(backend)
        for mode in modes:
            if mode.value not in supported:
                raise self.error(mode.line, f"mode {mode.value!r} is not supported by backend {backend!r} "
                                            f"({context}; supported: {', '.join(supported)})")

    def shapes(self, node: Node, what: str) -> tuple[At[Shape], ...]:
        if isinstance(node, MappingNode):
            return self.shape_product(node, what)
        out: list[At[Shape]] = []
        for item in self.items(node, what):
            self.unique(out, At(self.shape(item, what), line_of(item)), what)
        return tuple(out)

    def shape_product(self, node: MappingNode, what: str) -> tuple[At[Shape], ...]:
        fields = self.shape_fields(node, what)
        sizes: dict[str, list[int]] = {"batch": [1]}
        for name, (_, value) in fields.items():
            seen: list[At[int]] = []
            for item in self.items(value, f"{what}.{name}"):
                self.unique(seen, At(self.size(item, name), line_of(item)), f"{what}.{name}")
            sizes[name] = [s.value for s in seen]
        return tuple(At(Shape(h, w, b), line_of(node))
                     for h in sizes["height"] for w in sizes["width"] for b in sizes["batch"])

    def shape_fields(self, node: MappingNode, what: str) -> Fields:
        """A shape mapping (one shape, or the product form): known keys, height and width present."""
        fields = self.mapping(node, what)
        self.known_keys(fields, _SHAPE_KEYS, what)
        for required in ("height", "width"):
            if required not in fields:
                raise self.error(node, f"{what} is missing {required!r}")
        return fields

    def shape(self, node: Node, what: str) -> Shape:
        """One explicit shape: {height, width, batch} or "HxW" / "HxWxB"."""
        if isinstance(node, MappingNode):
            fields = self.shape_fields(node, f"a shape in {what}")
            sizes = {name: self.size(v, name) for name, (_, v) in fields.items()}
            return Shape(sizes["height"], sizes["width"], sizes.get("batch", 1))
        value = self.scalar(node)
        match = _SHAPE_RE.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise self.error(node, f"a shape in {what} must be {{height, width, batch}} or 'HxWxB', "
                                   f"got {describe(node)}")
        height, width, batch = (int(g) if g else 1 for g in match.groups())
        for name, size in (("height", height), ("width", width), ("batch", batch)):
            problem = _size_problem(size, name)
            if problem:
                raise self.error(node, f"shape {value!r}: {problem}")
        return Shape(height, width, batch)

    def size(self, node: Node, name: str) -> int:
        value = self.scalar(node)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(node, f"{name} must be a positive integer, got {describe(node)}")
        problem = _size_problem(value, name)
        if problem:
            raise self.error(node, problem)
        return value

    # --- models ------------------------------------------------------------------------------------

    def models(self, node: Node, defaults: _Matrix) -> tuple[ModelMatrix, ...]:
        if not isinstance(node, SequenceNode):
            raise self.error(node, f"models must be a list of models, got {describe(node)}")
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
        if "pipeline" in fields:  # the first release's spelling: named, so its reader learns the new one
            raise self.error(fields["pipeline"][0], f"{where} sets 'pipeline', which this release no longer reads; "
                                                    "write 'warmup: pipeline' instead")
        self.known_keys(fields, _MODEL_KEYS, where)
        ref = self.model_ref(node, fields, name, where)
        matrix = self.matrix(fields, f"{where} ").over(defaults)
        backends, backend_modes, dtypes, shapes = self.resolve(matrix, name, line_of(name_node))
        self.check_offload(fields, ref, backends, where)
        return ModelMatrix(
            model=ref, backends=backends, modes=tuple(sorted({m for _, ms in backend_modes for m in ms})),
            compile_modes=self.compile_modes(matrix, backends, where),
            dtypes=dtypes, shapes=shapes, backend_modes=backend_modes,
            line=line_of(name_node), path_line=line_of(fields["path"][1]) if "path" in fields else 0,
            priority=self.bounded(fields["priority"][1], f"{where} priority", 0, MAX_COUNT)
            if "priority" in fields else 0,
        )

    def model_ref(self, node: Node, fields: Fields, name: str, where: str) -> ModelRef:
        """What the build loads and how it warms the model up (everything but the matrix)."""
        path, hub, revision = self.source_of(node, fields, where)
        warmup, max_len, offload = self.warmup_fields(fields, where)
        return ModelRef(
            name=name,
            component=self.matching(fields["component"][1], f"{where} component", _COMPONENT_RE,
                                    "a pipeline attribute name") if "component" in fields else "transformer",
            path=path, hub=hub, revision=revision,
            inputs=self.inputs(fields["inputs"][1], where) if "inputs" in fields else "auto",
            tensor_parallel=self.integer(fields["tensor_parallel"][1], f"{where} tensor_parallel")
            if "tensor_parallel" in fields else 1,
            guidance=self.boolean(fields["guidance"][1], f"{where} guidance") if "guidance" in fields else False,
            warmup=warmup, max_sequence_length=max_len, offload=offload,
        )

    def source_of(self, node: Node, fields: Fields, where: str) -> tuple[str | None, str | None, str]:
        """(absolute path, hub id, revision); a hub model must pin a revision or its keys would lie."""
        revision = self.source_text(fields["revision"][1], f"{where} revision") if "revision" in fields else ""
        if "path" in fields and "hub" in fields:
            raise self.error(fields["hub"][0], f"{where} sets both 'path' and 'hub'; keep one")
        if "path" in fields:
            return local_path(self.string(fields["path"][1], f"{where} path"), self.base), None, revision
        if "hub" not in fields:
            raise self.error(node, f"{where} needs 'path' (a local diffusers folder) or 'hub' (org/repo)")
        hub = self.matching(fields["hub"][1], f"{where} hub", _HUB_RE, "a hub repo id (org/repo)")
        if not revision:
            at = fields["revision"][1] if "revision" in fields else fields["hub"][0]
            raise self.error(at, f"{where} from the hub needs a revision (a commit sha or tag) so its keys pin "
                                 "the weights")
        return None, hub, revision

    def warmup_fields(self, fields: Fields, where: str) -> tuple[str, int, str]:
        """(warmup, max_sequence_length, offload): how the build calls the pipeline; "" / 0 when unset."""
        chosen = {key: self.choice(fields, key, allowed, where) for key, allowed in (("warmup", WARMUPS),
                                                                                     ("offload", OFFLOADS))}
        max_len = self.integer(fields["max_sequence_length"][1], f"{where} max_sequence_length") \
            if "max_sequence_length" in fields else 0
        return chosen["warmup"], max_len, chosen["offload"]

    def choice(self, fields: Fields, key: str, allowed: tuple[str, ...], where: str) -> str:
        if key not in fields:
            return ""
        value = self.string(fields[key][1], f"{where} {key}")
        if value not in allowed:
            raise self.error(fields[key][1], f"{where} {key} must be {' or '.join(allowed)}, not {value!r}"
                                             f"{did_you_mean(value, allowed)}")
        return value

    def check_offload(self, fields: Fields, ref: ModelRef, backends: Sequence[str], where: str) -> None:
        if not ref.offload:
            return
        at = fields["offload"][1]
        if ref.warmup == "component":
            raise self.error(at, f"{where} offload applies to a pipeline warm-up; set warmup: pipeline or drop offload")
        for backend in backends:
            if not can_offload(backend):
                raise self.error(at, f"{where} offload: backend {backend!r} cannot offload to the CPU "
                                     f"(its graphs run on the device); drop offload or the {backend} backend")

    def inputs(self, node: Node, where: str) -> str:
        value = self.string(node, f"{where} inputs")
        if value not in INPUT_BUILDERS and not _INPUTS_RE.fullmatch(value):
            raise self.error(node, f"{where} inputs {value!r} is neither a builder nor 'package.module:function'"
                                   f"{did_you_mean(value, INPUT_BUILDERS)}")
        return value

    def resolve(self, matrix: _Matrix, name: str, line: int) -> tuple[
            tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...], tuple[Shape, ...]]:
        """Merged matrix -> sorted (backends, per-backend modes, dtypes, shapes); checks mode support."""
        if matrix.backends is None:
            raise self.missing("backends", name, line)
        if matrix.shapes is None:
            raise self.missing("shapes", name, line)
        modes = matrix.modes or _Modes(line, shared=tuple(At(m, line) for m in DEFAULT_MODES))
        backend_modes = tuple((b.value, self.modes_for(modes, b.value, name))
                              for b in sorted(matrix.backends, key=lambda b: b.value))
        dtypes = matrix.dtypes or tuple(At(d, line) for d in DEFAULT_DTYPES)
        return (tuple(b for b, _ in backend_modes), backend_modes, tuple(sorted(d.value for d in dtypes)),
                tuple(sorted(s.value for s in matrix.shapes)))

    def compile_modes(self, matrix: _Matrix, backends: Sequence[str], where: str) -> tuple[str, ...]:
        """The torch.compile modes of a model, sorted; each must be one a backend of the model takes."""
        if not matrix.compile_modes:
            return (DEFAULT_COMPILE_MODE,)
        for c in matrix.compile_modes:
            if not any(c.value in compile_modes_for(b) for b in backends):
                raise self.error(c.line, f"{where} compile mode {c.value!r} is not one its backends take "
                                         f"({', '.join(backends)}: "
                                         f"{', '.join(sorted({m for b in backends for m in compile_modes_for(b)}))})")
        return tuple(sorted({c.value for c in matrix.compile_modes}))

    def missing(self, key: str, model: str, line: int) -> ConfigError:
        return self.error(line, f"model {model!r} has no {key}; set defaults.{key} or {key} on the model")

    def modes_for(self, modes: _Modes, backend: str, model: str) -> tuple[str, ...]:
        chosen = modes.shared if modes.by_backend is None else modes.by_backend.get(backend)
        if chosen is None:
            raise self.error(modes.line, f"modes for model {model!r} list no modes for backend {backend!r}")
        self.supported(chosen, backend, f"model {model!r}")
        return tuple(sorted(m.value for m in chosen))
