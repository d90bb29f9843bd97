"""A deployment that one of infra's node scripts (``kafka.sh``, ``qdrant.sh``) starts in a temporary
folder on ports of its own: ``run`` any of the script's verbs on it, kill and start one node."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass
class NodeScript:
    script: ClassVar[Path]
    data: Path
    base_port: int

    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def argv(self, args: tuple[str, ...]) -> list[str]:
        """The script's arguments for a verb and its own: where the node count goes is each script's."""
        raise NotImplementedError

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", str(self.script), *self.argv(args)], env=self.env, capture_output=True, text=True
        )
        if check and done.returncode != 0:
            name = self.script.name
            raise RuntimeError(f"{name} {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done

    def kill(self, node: int) -> None:
        self.run("kill-node", str(node))

    def start(self, node: int) -> None:
        self.run("start-node", str(node))
