"""scripts/ensure-chromium, which ``make test`` runs first: its decisions, on a PATH that holds only
stand-ins (an ``apt-get`` that records its arguments and may install a ``chromium``, an ``id``), so
the machine's own Chromium is never touched."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-chromium"
BASH = shutil.which("bash") or "/bin/bash"
COMMAND = "apt-get update && apt-get install -y chromium"


@dataclass
class Machine:
    bin: Path
    log: Path

    def run(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BASH, str(SCRIPT)],
            env={"PATH": str(self.bin)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def apt_calls(self) -> list[list[str]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [line.split() for line in text.splitlines()]


def machine(
    tmp_path: Path,
    *,
    uid: int = 0,
    chromium: bool = False,
    apt: bool = True,
    lists_fetched: bool = True,
    installs: bool = True,
) -> Machine:
    """A PATH directory: ``id -u`` prints ``uid``; ``apt-get`` logs each call, and ``install``
    fails until ``update`` ran when the package lists were never fetched, and puts a ``chromium``
    on the PATH when ``installs``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"

    def script(name: str, body: str) -> None:
        path = bin_dir / name
        path.write_text(f"#!{BASH}\nPATH=/usr/bin:/bin\n{body}\n")
        path.chmod(0o755)

    script("id", f'[ "$1" = -u ] && echo {uid}')
    if chromium:
        script("chromium", "exit 0")
    if apt:
        fetched = tmp_path / "lists-fetched"
        if lists_fetched:
            fetched.touch()
        stand_in = bin_dir / "chromium"
        provide = f"printf '#!{BASH}\\nexit 0\\n' > {stand_in}; chmod +x {stand_in}"
        script(
            "apt-get",
            f"""echo "$*" >> {log}
case "$1" in
  update) touch {fetched} ;;
  install)
    [ -e {fetched} ] || {{ echo "E: Unable to locate package chromium" >&2; exit 100; }}
    {provide if installs else ":"}
    ;;
esac""",
        )
    return Machine(bin_dir, log)


def test_installed_already_does_nothing(tmp_path: Path) -> None:
    m = machine(tmp_path, chromium=True, uid=1000)
    done = m.run()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert m.apt_calls() == []


def test_missing_as_root_installs_it_once(tmp_path: Path) -> None:
    m = machine(tmp_path)
    assert m.run().returncode == 0
    assert m.apt_calls() == [["install", "-y", "-qq", "chromium"]]
    assert (m.bin / "chromium").exists()
    again = m.run()  # idempotent: now installed, nothing more is run
    assert again.returncode == 0 and again.stdout == ""
    assert len(m.apt_calls()) == 1


def test_unknown_package_updates_the_lists_then_installs(tmp_path: Path) -> None:
    m = machine(tmp_path, lists_fetched=False)
    done = m.run()
    assert done.returncode == 0, done.stderr
    assert [call[0] for call in m.apt_calls()] == ["install", "update", "install"]


def test_not_root_says_the_command_and_runs_nothing(tmp_path: Path) -> None:
    m = machine(tmp_path, uid=1000)
    done = m.run()
    assert done.returncode == 1
    assert COMMAND in done.stderr and "sudo" in done.stderr
    assert m.apt_calls() == []


def test_install_that_leaves_no_chromium_fails(tmp_path: Path) -> None:
    m = machine(tmp_path, installs=False)
    done = m.run()
    assert done.returncode == 1
    assert "not on PATH" in done.stderr


def test_failing_install_says_the_command(tmp_path: Path) -> None:
    m = machine(tmp_path, lists_fetched=False)
    (m.bin / "apt-get").write_text(f'#!{BASH}\necho "$*" >> {m.log}\nexit 100\n')
    done = m.run()
    assert done.returncode == 1
    assert COMMAND in done.stderr
    assert [call[0] for call in m.apt_calls()] == ["install", "update"]


def test_no_apt_get_says_so(tmp_path: Path) -> None:
    m = machine(tmp_path, apt=False)
    done = m.run()
    assert done.returncode == 1
    assert "apt-get" in done.stderr and "chromium" in done.stderr


def test_make_test_runs_it_and_ci_leaves_it_to_make() -> None:
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    ensure = next(i for i, line in enumerate(planned) if "scripts/ensure-chromium" in line)
    pytest_run = next(i for i, line in enumerate(planned) if "/pytest " in line)
    assert ensure < pytest_run
    assert "apt-get" not in (ROOT / ".ci" / "run").read_text()
