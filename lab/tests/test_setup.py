"""scripts/setup.sh, run by make bench and make test, must name every Debian package a fresh
Debian 12 needs for what it then runs."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _missing_on_a_fresh_machine(tmp_path: Path, *args: str) -> list[str]:
    """The packages setup.sh names as missing when none is installed, run as a user who is not
    root (it then only names them, installing nothing)."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")  # nothing installed
    (stubs / "id").write_text("#!/bin/sh\necho 1000\n")
    for s in stubs.iterdir():
        s.chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), *args], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("setup: missing Debian packages: ")]
    return line.split(": ", 2)[2].split()


def test_setup_installs_what_python3_m_venv_needs(tmp_path):
    # Debian's python3 leaves ensurepip out (python3-venv, only suggested, has it): without it
    # `python3 -m venv .venv` fails, and with it make bench and make test on a fresh machine.
    assert "python3-venv" in _missing_on_a_fresh_machine(tmp_path)


def test_setup_build_needs_no_python(tmp_path):
    assert "python3-venv" not in _missing_on_a_fresh_machine(tmp_path, "--build")
