"""scripts/ensure-crates, which the Makefile runs before it installs the project: its decisions, on
a PATH that holds only stand-ins (an ``apt-get`` that records its arguments, an ``id``, maybe a
``cargo``) and a crate directory of its own, so the machine's own packages are never touched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-crates"
BASH = shutil.which("bash") or "/bin/bash"
CRATES = ["pyo3-0.17.3", "pyo3-macros-backend-0.17.3", "serde-1.0.152", "serde_derive-1.0.152",
          "serde_json-1.0.87"]  # fmt: skip
PACKAGES = "librust-pyo3-dev librust-serde-dev librust-serde-derive-dev librust-serde-json-dev"


def run(
    tmp_path: Path, *, uid: int = 0, cargo: bool = True, crates: bool = True, installs: bool = True
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The script on a stand-in machine; returns its result and the apt-get calls it made. The
    stand-in ``apt-get install`` creates the crate directories when ``installs``."""
    bin_dir, registry, log = tmp_path / "bin", tmp_path / "registry", tmp_path / "apt.log"
    bin_dir.mkdir()
    registry.mkdir()

    def script(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!{BASH}\nPATH=/usr/bin:/bin\n{body}\n")
        (bin_dir / name).chmod(0o755)

    script("id", f'[ "$1" = -u ] && echo {uid}')
    if cargo:
        script("cargo", "exit 0")
    made = " ".join(str(registry / crate) for crate in CRATES)
    install = f"mkdir -p {made}" if installs else "exit 100"
    script("apt-get", f'echo "$*" >> {log}\n[ "$1" = install ] || exit 0\n{install}')
    if crates:
        for crate in CRATES:
            (registry / crate).mkdir()
    done = subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": str(bin_dir), "ENSURE_CRATES_REGISTRY": str(registry)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def test_present_returns_at_once(tmp_path: Path) -> None:
    done, calls = run(tmp_path)
    assert (done.returncode, calls, done.stdout, done.stderr) == (0, [], "", "")


def test_missing_crates_as_root_are_installed(tmp_path: Path) -> None:
    done, calls = run(tmp_path, crates=False)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 1 and calls[0].startswith("install") and calls[0].endswith(PACKAGES)


def test_missing_as_another_user_says_the_command(tmp_path: Path) -> None:
    done, calls = run(tmp_path, uid=1000, crates=False, cargo=False)
    assert done.returncode == 1 and calls == []
    assert f"sudo sh -c 'apt-get update && apt-get install -y cargo {PACKAGES}'" in done.stderr


def test_a_failing_install_updates_then_says_the_command(tmp_path: Path) -> None:
    done, calls = run(tmp_path, crates=False, installs=False)
    assert done.returncode == 1
    assert [call.split()[0] for call in calls] == ["install", "update", "install"]
    assert f"apt-get install -y {PACKAGES} failed" in done.stderr


def test_the_install_step_runs_it_first() -> None:
    planned = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    # One shell line or several: the crates are ensured before the editable install is run.
    ensure = planned.find("scripts/ensure-crates")
    install = planned.find("pip install -q -e")
    assert 0 <= ensure < install, planned
