"""A backend from an outside package, written against the documented contract alone (backends/base.py),
passes BackendConformance where it is installed, its real build subprocess included."""

from __future__ import annotations

from .distributions import HERE, Plugged


def test_the_plugin_backend_passes_backend_conformance(plugged: Plugged) -> None:
    proc = plugged.python("-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-rs",
                          str(HERE / "echo_backend" / "conformance.py"), timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 15, summary   # the suite ran, its build included
    assert "names no build to run" not in proc.stdout
