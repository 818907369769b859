"""`cachekeeper explain`: would this host hit an entry, and if not, which built toolchain is nearest and
exactly which fields keep it apart, with a one-line hint per common cause.

Light on purpose (no SQLAlchemy, no torch): hydrate's `--json` calls `explain_misses` for its missed
entries, reading the other toolchains' manifests straight from the store listing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CachekeeperError, ManifestError, ObjectNotFound
from ..format.fingerprint import Fingerprint
from ..format.layout import manifest_key
from ..format.manifest import Manifest
from ..presence import plan_presence
from ..stores.base import Store
from ..stores.manifests import manifest_keys

NEAREST = 3
ABSENT = "∅"   # Fingerprint.diff's mark for a field one side lacks

# Fields whose value is an installed package's version (backend fingerprints name them so).
VERSION_FIELDS = frozenset({"torch", "torch_neuronx", "neuronx_cc", "torch_tpu", "libtpu", "python", "triton",
                            "cuda", "diffusers", "transformers"})
ISA_FIELDS = frozenset({"cpu_isa", "env.ATEN_CPU_CAPABILITY"})
THREAD_FIELDS = frozenset({"omp_threads", "env.OMP_NUM_THREADS"})
FLAG_WORDS = ("flags", "opt_level", "cxx", "init_args", "logical_nc_config", "xla_options", "inductor")
HARDWARE_FIELDS = frozenset({"device", "target", "chip", "topology", "gpu", "gpu_cc", "pjrt_platform"})


@dataclass(frozen=True)
class Nearest:
    """A toolchain that has the entry built, and what separates it from this host."""

    fingerprint_id: str
    differs: dict[str, tuple[str, str]]      # field -> (built toolchain, this host)
    hints: tuple[str, ...]                   # one per differing field

    def to_dict(self) -> dict[str, Any]:
        return {"fingerprint_id": self.fingerprint_id,
                "differs": {k: {"built": a, "host": b} for k, (a, b) in self.differs.items()},
                "hints": list(self.hints)}


@dataclass(frozen=True)
class Explanation:
    key: str
    label: str
    host_fingerprint_id: str
    hit: bool
    nearest: tuple[Nearest, ...]      # empty on a hit, or when no toolchain has it built
    built_elsewhere: int              # how many other toolchains of the backend have it

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "entry": self.label, "host_fingerprint_id": self.host_fingerprint_id,
                "hit": self.hit, "built_elsewhere": self.built_elsewhere,
                "nearest": [n.to_dict() for n in self.nearest]}

    def lines(self) -> list[str]:
        head = f"{self.key[:12]}  {self.label}"
        if self.hit:
            return [f"HIT   {head}: built for this host's toolchain {self.host_fingerprint_id}"]
        out = [f"MISS  {head}: not built for this host's toolchain {self.host_fingerprint_id}"]
        if not self.nearest:
            out.append("  no toolchain has it built: `cachekeeper prebuild` builds it")
            return out
        out.append(f"  built for {self.built_elsewhere} other toolchain(s); nearest:")
        for n in self.nearest:
            out.append(f"  {n.fingerprint_id}: {len(n.differs)} field(s) differ")
            for (name, (built, host)), hint in zip(n.differs.items(), n.hints, strict=True):
                out.append(f"    {name}: {built!r} (built) vs {host!r} (this host)")
                out.append(f"      hint: {hint}")
        return out


def hint(name: str, built: str, host: str) -> str:
    """One line naming the likely cause and the next step."""
    if ABSENT in (built, host):
        side = "the builders record" if host == ABSENT else "this host records"
        return (f"only {side} {name!r}: a different backend option, env var or cachekeeper release "
                "made the fingerprints; align them or prebuild on a host like this one")
    if name in THREAD_FIELDS:
        return _threads_hint(built, host)
    if name in ISA_FIELDS:
        return (f"different CPU instruction set ({built} built, {host} here): prebuild on this instance "
                "type; never force ATEN_CPU_CAPABILITY to reuse it (wrong results)")
    if name in VERSION_FIELDS:
        return f"package version: {name} {built} built, {host} here; install {name}=={built} or prebuild for {host}"
    if name.endswith("_path"):
        return (f"{name.removesuffix('_path')} is installed at another path ({built} built, {host} here); "
                "install it where the builders do (same image or venv path) or prebuild here")
    if name in HARDWARE_FIELDS:
        return f"different hardware ({name}): prebuild on a {host} host; {built} artifacts cannot serve it"
    if any(w in name for w in FLAG_WORDS) or name.startswith(("env.", "option.")):
        return (f"compiler flag/setting {name} differs; set it as the builders did ({built!r}) or prebuild "
                "with this host's value")
    return f"{name} differs; make it match the builders ({built!r}) or prebuild for this host"


def _threads_hint(built: str, host: str) -> str:
    """`default:N` is how backends record an unset OMP_NUM_THREADS (N: the cores the process could use)."""
    want = built.removeprefix("default:")
    if built.startswith("default:") and host.startswith("default:"):
        return (f"OMP_NUM_THREADS is unset on both sides and the core counts differ ({want} built, "
                f"{host.removeprefix('default:')} here); set it explicitly on builders and hosts (e.g. {want})")
    if host.startswith("default:"):
        return (f"OMP_NUM_THREADS is unset here (default {host.removeprefix('default:')} threads); "
                f"export OMP_NUM_THREADS={want} as the builders did")
    return f"OMP_NUM_THREADS is {host} here and {built} on the builders; use the same value on both"


def nearest(host: Fingerprint, built_for: Iterable[Fingerprint], limit: int = NEAREST) -> tuple[Nearest, ...]:
    """Toolchains of the host's backend, fewest differing fields first."""
    ranked = sorted(((len(fp.diff(host)), fp.id, fp) for fp in built_for
                     if fp.backend == host.backend and fp.id != host.id), key=lambda t: (t[0], t[1]))
    out = []
    for _, fp_id, fp in ranked[:limit]:
        differs = fp.diff(host)
        out.append(Nearest(fp_id, differs, tuple(hint(k, a, b) for k, (a, b) in differs.items())))
    return tuple(out)


def explain_entry(host: Fingerprint, key: str, label: str, built_for: Sequence[Fingerprint],
                  limit: int = NEAREST, *, hit: bool | None = None) -> Explanation:
    """`built_for`: every toolchain that has `key` built (the host's own included if it has). `hit`: the
    presence plan's answer for the host, when the caller has one (else: the host is among `built_for`)."""
    if hit is None:
        hit = any(fp.id == host.id for fp in built_for)
    others = [fp for fp in built_for if fp.backend == host.backend and fp.id != host.id]
    return Explanation(key=key, label=label, host_fingerprint_id=host.id, hit=hit,
                       nearest=() if hit else nearest(host, others, limit), built_elsewhere=len(others))


def explain_from_store(store: Store, host: Fingerprint, names: Sequence[str],
                       labels: Mapping[str, str] | None = None) -> list[Explanation]:
    """Explanations from the store alone (hydrate's misses, `explain --no-catalog`): one listing of
    manifests/, then one manifest read per other toolchain (its fields are the same in all its manifests)."""
    if not names:
        return []
    wanted = set(names)
    holders: dict[str, list[str]] = {n: [] for n in names}   # entry name -> fingerprint ids that built it
    for m in manifest_keys(store):
        if m.name in wanted:
            holders[m.name].append(m.fingerprint_id)
    presence = plan_presence(host.id, names, stored={n for n in names if host.id in holders[n]})
    fingerprints: dict[str, Fingerprint | None] = {host.id: host}
    out = []
    for name in names:
        built = []
        for fp_id in holders[name]:
            if fp_id not in fingerprints:
                fingerprints[fp_id] = _read_fingerprint(store, fp_id, name)
            fp = fingerprints[fp_id]
            if fp is not None:
                built.append(fp)
        out.append(explain_entry(host, name, (labels or {}).get(name, name), built, hit=presence.is_built(name)))
    return out


def explain_misses(open_store: Callable[[], Store], host: Fingerprint, names: Sequence[str],
                   labels: Mapping[str, str] | None = None) -> list[dict[str, Any]] | str:
    """Hydrate's `--json` hook: the same explanation `cachekeeper explain` prints, for each missed entry.
    Informative only: a store failure here yields its one-line message, never a failed boot."""
    try:
        store = open_store()
        try:
            return [e.to_dict() for e in explain_from_store(store, host, names, labels)]
        finally:
            store.close()
    except CachekeeperError as exc:
        return f"unavailable: {exc.message}"


def _read_fingerprint(store: Store, fp_id: str, name: str) -> Fingerprint | None:
    key = manifest_key(fp_id, name)
    try:
        return Manifest.from_bytes(store.get_bytes(key), source=key).fingerprint
    except (ManifestError, ObjectNotFound):
        return None   # unreadable: `cachekeeper verify` reports it; an explanation just skips it
