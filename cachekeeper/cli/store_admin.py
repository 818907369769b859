"""Store administration commands: show, verify and gc read the bucket (the source of truth) directly."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from . import cli
from .options import json_option, opened_store, say, store_option

if TYPE_CHECKING:
    from ..admin.gc import GcPlan
    from ..stores.base import Store


@cli.command()
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


@cli.command()
@store_option
@click.option("--deep", is_flag=True, help="download and hash every blob (slow)")
@click.option("--repair", is_flag=True, help="delete bad blobs and the manifests naming them, for prebuild to redo")
@json_option
def verify(store_url: str | None, deep: bool, repair: bool, as_json: bool) -> None:
    """Check that every manifest's blobs exist (and with --deep, match their digests)."""
    from ..admin.inventory import scan
    from ..admin.verify import repair as repair_store
    from ..admin.verify import verify_store

    with opened_store(store_url, None) as store:
        inventory = scan(store, debris=False)
        problems = list(verify_store(store, inventory, deep=deep))
        count = len(inventory.manifests) + len(inventory.unreadable)
        if as_json:
            click.echo(json.dumps({"manifests": count, "problems": [p.__dict__ for p in problems]}))
        for p in problems:
            click.echo(f"BAD  {p.key}: {p.what}")
        say(f"verify: {count} manifests, {len(problems)} problems")
        if problems and repair:
            for key in repair_store(store, inventory, problems):
                click.echo(f"removed  {key}")
            say("verify: repaired; `cachekeeper prebuild --verify-store` rebuilds the removed entries "
                 "(and `cachekeeper catalog rebuild` drops their rows)")
    if problems:
        sys.exit(1)


@cli.command()
@store_option
@click.option("--drop", "drop", multiple=True, metavar="FINGERPRINT", help="also delete this toolchain's manifests")
@click.option("--min-age", default=3600.0, show_default=True, metavar="SECONDS",
              help="keep unreferenced objects younger than this (a publish in flight writes blobs first)")
@click.option("--run", "execute", is_flag=True, help="delete (default: only print the plan)")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: one per object to delete, then the totals")
def gc(store_url: str | None, drop: tuple[str, ...], min_age: float, execute: bool, as_json: bool) -> None:
    """Delete unreferenced blobs (and the manifests of --drop toolchains). Plans unless --run."""
    from ..admin.gc import plan_gc, run_gc
    from ..admin.inventory import scan

    with opened_store(store_url, None) as store:
        plan = plan_gc(scan(store), set(drop), min_age=min_age)
        (_gc_json_lines if as_json else _gc_text_lines)(plan, execute)
        for key in plan.unreadable:
            say(f"warning: unreadable manifest kept: {key}")
        if execute:
            run_gc(store, plan)
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
