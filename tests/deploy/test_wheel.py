"""The wheel holds the package, never the workshop (issue 40): the demos, the private local servers,
the recorded upstream and the example gateway live in ``devtools/``, outside it; the vocabularies
and the price data ship inside it. Built for real, by pip, as a deployment would build it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKSHOP = ("devtools/", "tests/", "benchmarks/", "scripts/")


def test_the_wheel_has_the_package_and_none_of_the_workshop(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert tops == {"worker", "models", "migrations"}
    assert not [name for name in names if name.startswith(WORKSHOP)]
    workshop = ("demo", "localservers", "recorded_upstream", "example_app")
    assert not [name for name in names if any(word in name for word in workshop)]
    # what the package needs at run time is in it
    for needed in (
        "worker/core/vocab/o200k_base.tiktoken.gz",
        "worker/core/vocab/SHA256SUMS",
        "worker/data/litellm_prices.json",
        "worker/data/prices.toml",
        "migrations/alembic.ini",
        "worker/core/reconcile.py",
        "worker/contract/publisher.py",
        "worker/consumer/consumer.py",
    ):
        assert needed in names, needed
    assert any(name.startswith("worker/plain_chunk") and name.endswith(".so") for name in names)
