"""``worker/upstream`` sits below what uses it: it imports none of the alerts, the reports, the
pipeline, the service, the CLI or the demo (they import it), so no package cycle runs through it."""

from __future__ import annotations

import ast
from pathlib import Path

UPSTREAM = Path(__file__).resolve().parents[2] / "worker" / "upstream"
ABOVE = ("alerts", "reports", "pipeline", "service", "cli", "demo", "demo_upstream")


def test_upstream_imports_nothing_above_it() -> None:
    found = []
    for path in sorted(UPSTREAM.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                (path.name, name)
                for name in names
                if any(name == f"worker.{up}" or name.startswith(f"worker.{up}.") for up in ABOVE)
            ]
    assert found == []
    assert len(list(UPSTREAM.glob("*.py"))) >= 6  # the check saw the package
