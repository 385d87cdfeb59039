"""The previous release of txmq, installed from its wheel into a venv of its own (built once, cached).

The previous release is the commit this work on versions started from (PREVIOUS_RELEASE): its
tree is taken with `git archive`, built into a wheel as a user's `pip wheel` would, and installed
without dependencies into .cache/upgrade/venv-<commit>. Its dependencies are this venv's (the same
pins, one commit apart): a .pth file puts this venv's site-packages after its own, so `txmq`
itself always comes from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# main before versions existed (the commit the `upgrade` branch starts from)
PREVIOUS_RELEASE = "1f71a8bd927c8c279ab9d73b03c25f3e9636e271"
CACHE = REPO / ".cache" / "upgrade"


def _run(cmd: list[str], **kw) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def previous_release_wheel(commit: str = PREVIOUS_RELEASE) -> Path:
    """The wheel of `commit`, built once into .cache/upgrade/wheels-<commit>/."""
    out = CACHE / f"wheels-{commit[:12]}"
    found = sorted(out.glob("txmq-*.whl"))
    if found:
        return found[0]
    src = CACHE / f"src-{commit[:12]}"
    if not (src / "pyproject.toml").exists():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)])
    return sorted(out.glob("txmq-*.whl"))[0]


def previous_release_python(commit: str = PREVIOUS_RELEASE) -> Path:
    """A Python whose `txmq` is the previous release, from its wheel."""
    venv = CACHE / f"venv-{commit[:12]}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    wheel = previous_release_wheel(commit)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies: this venv's site-packages, after the wheel's own (and without its .pth files,
    # so this tree's editable txmq is not on the path)
    Path(site, "zz_txmq_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    check = subprocess.run([str(python), "-c", "import txmq.broker, pathlib; print(pathlib.Path(txmq.broker.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert check.startswith(str(venv)), f"the previous release's venv imports txmq from {check}"
    stamp.touch()
    return python
