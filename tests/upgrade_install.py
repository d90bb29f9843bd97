"""An earlier memstream installed beside the current one, for the upgrade tests: a commit of this
repository's history (``git archive``) installed without its dependencies into a folder of its own
(``pip install --no-deps --target``), which a process puts first on its path to run that version with
this virtual environment's libraries."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The checkout is installed editable: its import hook (appended to sys.meta_path by a .pth file) maps
# every memstream.* name to the checkout, so a module only the current version has (or one the
# earlier version looks up by name) would still be found there. site imports this file after the .pth
# files, from the install's folder (first on PYTHONPATH), and takes the hook away.
SITECUSTOMIZE = """\
import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
"""

# What the process imports, asked the way the worker is started (same interpreter, same environment).
PROBE = """\
import importlib.util, json, memstream, memstream.streams.cli
print(json.dumps({
    "memstream": memstream.__file__,
    "cli": memstream.streams.cli.__file__,
    "has_record": importlib.util.find_spec("memstream.schemas.record") is not None,
}))
"""


@dataclass(frozen=True)
class Install:
    """Commit ``commit`` installed in ``path``."""

    commit: str
    path: Path

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to run this version: the install first on the path, and not the working
        directory (``python -m`` would put it first, and in the checkout ``./memstream`` is the current
        package)."""
        rest = os.environ.get("PYTHONPATH")
        return {"PYTHONPATH": str(self.path) + (os.pathsep + rest if rest else ""), "PYTHONSAFEPATH": "1"}

    def probe(self, env: dict[str, str] | None = None) -> dict[str, object]:
        """Where a process started with this install's environment (and ``env``) imports memstream from."""
        import json

        done = subprocess.run(
            [sys.executable, "-c", PROBE],
            env={**os.environ, **(env or {}), **self.env},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.splitlines()[-1])


def install(commit: str, dest: Path) -> Install:
    """Install ``commit`` of this repository into ``dest`` (which must not exist yet); checks that a
    process with its environment runs it and not the checkout."""
    if subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO).returncode != 0:
        raise RuntimeError(f"commit {commit} is not in this clone's history (a shallow clone?): git fetch --unshallow")
    src, target = dest / "src", dest / "site"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-compile"]
    done = subprocess.run([*pip, "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (target / "sitecustomize.py").write_text(SITECUSTOMIZE)
    installed = Install(commit, target)
    seen = installed.probe()
    assert Path(str(seen["memstream"])).is_relative_to(target), seen
    assert Path(str(seen["cli"])).is_relative_to(target), seen
    return installed
