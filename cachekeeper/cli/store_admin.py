"""Store administration commands: show, verify and gc read the bucket (the source of truth) directly."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from .. import bounds
from .options import (
    catalog_option,
    excludes,
    forget_in_catalog,
    json_option,
    needs,
    number,
    opened_store,
    say,
    store_option,
)

if TYPE_CHECKING:
    from ..admin.gc import GcPlan
    from ..stores.base import Store


@click.command()
@click.argument("key")
@store_option
@click.option("--json", "as_json", is_flag=True, help="the manifest on one line (default: indented JSON)")
def show(key: str, store_url: str | None, as_json: bool) -> None:
    """Print the manifest of an entry (KEY: entry key or prefix, or a manifest path in the store)."""
    from ..format.manifest import Manifest

    with opened_store(store_url, None) as store:
        found = _manifest_at(store, key)
        m = Manifest.from_bytes(store.get_bytes(found), source=found)
    doc = m.to_dict()
    doc["digest"] = m.digest
    doc["key"] = found
    click.echo(json.dumps(doc, sort_keys=True) if as_json else json.dumps(doc, indent=2, sort_keys=True))


def _manifest_at(store: Store, key: str) -> str:
    """The one manifest key that `key` names: itself, or the manifest whose name starts with it."""
    from ..errors import UsageError
    from ..format.layout import matching, parse_manifest_key
    from ..stores.manifests import manifest_keys

    exact = parse_manifest_key(key)
    if exact is not None:
        return exact.key
    found = matching(manifest_keys(store), key)
    if len(found) != 1:
        raise UsageError(f"{len(found)} manifests match {key!r}", "give a longer key prefix or the manifest path",
                         key=key)
    return found[0].key


@click.command()
@store_option
@catalog_option
@click.option("--deep", is_flag=True, help="download and hash every blob (slow)")
@click.option("--repair", is_flag=True, help="delete bad blobs and the manifests naming them, for prebuild to redo")
@json_option
def verify(store_url: str | None, catalog_url: str | None, deep: bool, repair: bool, as_json: bool) -> None:
    """Check that every manifest's blobs exist (and with --deep, match their digests)."""
    from ..admin.verify import repair as repair_store
    from ..admin.verify import verify_store
    from ..stores.inventory import scan

    with opened_store(store_url, None) as store:
        inventory = scan(store, debris=False)
        problems = list(verify_store(store, inventory, deep=deep))
        count = len(inventory.manifests) + len(inventory.unreadable)
        removed = list(repair_store(store, inventory, problems)) if problems and repair else []
        forgotten = forget_in_catalog(catalog_url, [k for k in removed if k.startswith("manifests/")])
        if as_json:   # one document, alone on stdout
            click.echo(json.dumps({"manifests": count, "problems": [p.__dict__ for p in problems],
                                   "removed": removed, "catalog_rows_removed": forgotten}))
        else:
            for p in problems:
                click.echo(f"BAD  {p.key}: {p.what}")
            for key in removed:
                click.echo(f"removed  {key}")
        say(f"verify: {count} manifests, {len(problems)} problems")
        if removed:
            say(f"verify: repaired; {forgotten or 0} catalog rows removed, so `cachekeeper prebuild` rebuilds "
                "those entries")
    if problems:
        sys.exit(1)


@click.command()
@store_option
@catalog_option
@click.option("--drop", "drop", multiple=True, metavar="FINGERPRINT", help="also delete this toolchain's manifests")
@number("--min-age", bound=bounds.MIN_AGE, default=3600.0, show_default=True,
              help="keep unreferenced objects younger than this (a publish in flight writes blobs first)")
@click.option("--run", "execute", is_flag=True, help="delete (default: only print the plan)")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: one per object to delete, then the totals")
@click.option("--dest", "dests", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
              help="reclaim a hydrated dest instead: the dirs of toolchains other than its current one, and with "
              "--max-bytes fit the current one to that budget by last use")
@click.option("--node-cache", type=click.Path(file_okay=False), help="instead: fit this node cache to --max-bytes")
@click.option("--max-bytes", "max_bytes", metavar="BYTES", help="the budget for --dest / --node-cache (e.g. 50G)")
@click.option("--keep-lockfile", "keep_lockfiles", multiple=True, type=click.Path(dir_okay=False),
              help="with --dest and --max-bytes: never evict the entries this lockfile pins")
def gc(store_url: str | None, catalog_url: str | None, drop: tuple[str, ...], min_age: float, execute: bool,
       as_json: bool, dests: tuple[str, ...], node_cache: str | None, max_bytes: str | None,
       keep_lockfiles: tuple[str, ...]) -> None:
    """Delete unreferenced blobs (and the manifests of --drop toolchains). Plans unless --run.

    With --dest: reclaim old toolchains of a hydrated dir (and fit it to --max-bytes); with --node-cache:
    evict by last use to fit --max-bytes. Both are local (no store)."""
    needs("keep_lockfiles", "dests")
    needs("max_bytes", "dests", "node_cache")
    for flag in ("drop", "store_url", "catalog_url"):
        excludes(flag, "dests", "gc --dest works on the local dir, not the store")
        excludes(flag, "node_cache", "gc --node-cache works on the local cache, not the store")
    if dests or node_cache:
        from .local_gc import local_gc

        local_gc(dests, node_cache, max_bytes, keep_lockfiles, min_age, execute, as_json)
        return
    from ..admin.gc import plan_gc, run_gc
    from ..stores.inventory import scan

    with opened_store(store_url, None) as store:
        plan = plan_gc(scan(store), set(drop), min_age=min_age)
        (_gc_json_lines if as_json else _gc_text_lines)(plan, execute)
        for key in plan.unreadable:
            say(f"warning: unreadable manifest kept: {key}")
        if execute:
            run_gc(store, plan)
            forget_in_catalog(catalog_url, plan.delete_manifests)   # the catalog follows the store
        debris_note = store.debris_note
    say(f"gc: {len(plan.delete_manifests)} manifests, {len(plan.delete_blobs)} blobs "
         f"{'deleted' if execute else 'to delete (pass --run)'}; {plan.keep_blobs} blobs kept, "
         f"{plan.young} unreferenced objects younger than {min_age:.0f}s kept")
    say(f"gc: {len(plan.delete_debris)} pieces of debris of killed publishers "
         f"{'removed' if execute else 'to remove'}, {plan.young_debris} younger than {min_age:.0f}s kept"
         + (f"; {debris_note}" if debris_note else ""))
    if as_json:
        click.echo(json.dumps({"summary": {
            "run": execute, "manifests": len(plan.delete_manifests), "signatures": len(plan.delete_signatures),
            "blobs": len(plan.delete_blobs), "debris": len(plan.delete_debris), "kept_blobs": plan.keep_blobs,
            "young": plan.young, "young_debris": plan.young_debris, "unreadable": list(plan.unreadable)}}))


def _gc_text_lines(plan: GcPlan, execute: bool) -> None:
    for key in plan.delete_manifests + plan.delete_signatures + plan.delete_blobs:
        click.echo(f"{'delete' if execute else 'would delete'}  {key}")
    for item in plan.delete_debris:
        verb = ("abort" if execute else "would abort") if item.kind == "multipart" else \
            ("delete" if execute else "would delete")
        click.echo(f"{verb}  {item.key}" + (f"  (unfinished upload {item.upload_id})" if item.upload_id else ""))


def _gc_json_lines(plan: GcPlan, execute: bool) -> None:
    """gc's listing as JSON lines, streamed: a store-wide plan can name millions of blobs."""
    for kind, keys in (("manifest", plan.delete_manifests), ("signature", plan.delete_signatures),
                       ("blob", plan.delete_blobs)):
        for key in keys:
            click.echo(json.dumps({"action": "delete", "run": execute, "kind": kind, "key": key}))
    for item in plan.delete_debris:
        click.echo(json.dumps({"action": "abort" if item.kind == "multipart" else "delete", "run": execute,
                               "kind": f"debris:{item.kind}", "key": item.key, "upload_id": item.upload_id}))
