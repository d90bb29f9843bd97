"""Generations of memstream's collection set: a complete new set is built beside the one workers
use, then readers are switched to it at once, and the old set is removed only when asked
(``memstream rebuild``).

Naming (the one rule, :func:`collection_prefix`): generation 0 is a store made before generations,
its collections named ``<prefix><name>``; generation N >= 1 names them ``<prefix>g<N>_<name>``.

- Server: workers address ``<prefix><name>``, which is a Qdrant alias of the active generation's
  collection (every point operation, get_collection and the cluster info resolve aliases). A new
  store starts at generation 1 (collection and alias made by ensure_collections); a store made
  before generations keeps its physical ``<prefix><name>`` collections as generation 0. The switch
  re-points every alias in ONE ``update_collection_aliases`` call, which the server applies
  atomically. Away from generation 0 it cannot be atomic (an alias cannot take the name of an
  existing collection): the legacy collections are deleted first (``drop_legacy``).
- Embedded (Qdrant Edge, qdrant-client's local mode): every generation lives in the store folder
  under its own prefix, the active one named by the pointer file ``generation.json`` (absent: 0).
  Workers hold the folder's main lock ``.lock``; a generation open in a process holds ``.lock-g<N>``
  too, so a generation other than the active one can be built beside a serving worker (Edge only:
  local mode locks the whole folder) and two processes never open the same generation. The pointer
  is moved only under ``.lock`` (:func:`exclusive_store`), so a worker that holds ``.lock`` reads
  a pointer that cannot change under it.

Importing this module loads no Qdrant library.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator

from .qdrant_shared import COLLECTION_PREFIX

if TYPE_CHECKING:
    from memstream.config import Settings
    from memstream.ports import VectorStore

log = logging.getLogger(__name__)

POINTER = "generation.json"  # the embedded store's active generation
WORKER_LOCK = ".lock"  # the embedded folder's main lock (qdrant-client's local mode takes the same file)
_NAME = re.compile(r"[A-Za-z0-9-]+")  # a memstream collection's own name (cards, turns, meta, ...): no "_"
_GENERATION = re.compile(r"g([0-9]+)_(.+)")


class StoreLocked(RuntimeError):
    """The embedded store's folder (or one of its generations) is held by another process or store
    instance: a running worker, or a rebuild building that generation."""


# -- naming --------------------------------------------------------------------------------------
def collection_prefix(prefix: str, generation: int) -> str:
    """What generation ``generation``'s collections are named with: ``prefix`` (0: made before
    generations), else ``<prefix>g<N>_``."""
    if generation < 0:
        raise ValueError(f"no generation {generation}")
    return prefix if generation == 0 else f"{prefix}g{generation}_"


def parse_collection(prefix: str, physical: str) -> tuple[int, str] | None:
    """(generation, collection) of a physical collection name, or None where it is not one of
    ``prefix``'s (another deployment's prefix that starts with this one included)."""
    if not physical.startswith(prefix):
        return None
    rest = physical[len(prefix) :]
    m = _GENERATION.fullmatch(rest)
    generation, name = (int(m.group(1)), m.group(2)) if m else (0, rest)
    if (m and generation == 0) or not _NAME.fullmatch(name):
        return None
    return generation, name


def generation_lock(generation: int) -> str:
    """The lock file a process holds while it has generation ``generation`` of an embedded store open."""
    return f".lock-g{generation}"


def by_generation(prefix: str, physical: Iterator[str] | set[str] | list[str]) -> dict[int, set[str]]:
    """Generation -> its collections' names, from physical collection names."""
    out: dict[int, set[str]] = {}
    for full in physical:
        parsed = parse_collection(prefix, full)
        if parsed:
            out.setdefault(parsed[0], set()).add(parsed[1])
    return out


# -- embedded: locks and the pointer ------------------------------------------------------------
def take_lock(path: Path, what: str) -> IO[str]:
    """``path`` locked by this open file (released by :func:`release_lock`); StoreLocked at once
    when another open file holds it (another process, or another store in this one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        raise StoreLocked(f"{what} ({path} is held)") from exc
    return fh


def release_lock(fh: IO[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        fcntl.flock(fh, fcntl.LOCK_UN)
    fh.close()


def read_pointer(folder: Path) -> int:
    try:
        return int(json.loads((folder / POINTER).read_text())["generation"])
    except FileNotFoundError:
        return 0


def write_pointer(folder: Path, generation: int) -> None:
    """The pointer replaced atomically: a reader sees the old file or the new one, whole."""
    tmp = folder / f".{POINTER}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"generation": generation}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / POINTER)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


_EXCLUSIVE: dict[Path, IO[str]] = {}  # store folders this process holds by exclusive_store


@contextlib.contextmanager
def exclusive_store(settings: Settings) -> Iterator[None]:
    """Embedded: hold the store folder's main lock, so no worker can open the store meanwhile
    (StoreLocked at once if one has it open). No store of this folder's active generation can be
    opened in this process meanwhile either (the lock is per open file). Server: nothing to hold."""
    if settings.qdrant_url:
        yield
        return
    folder = settings.store_path.resolve()
    fh = take_lock(folder / WORKER_LOCK, f"the store at {folder} is open in a running worker: stop it first")
    _EXCLUSIVE[folder] = fh
    try:
        yield
    finally:
        del _EXCLUSIVE[folder]
        release_lock(fh)


# -- server: collections and aliases ------------------------------------------------------------
@dataclass
class ServerSets:
    """memstream's collections on a server, for one prefix."""

    prefix: str
    physical: dict[int, set[str]]  # generation -> its collections
    aliases: dict[str, int] = field(default_factory=dict)  # collection -> the generation its alias points to

    @property
    def active(self) -> int:
        """The generation the aliases point to; 0 where a legacy collection and no alias exists;
        1 (what ensure_collections makes) where there is nothing yet."""
        if self.aliases:
            pointed = set(self.aliases.values())
            if len(pointed) > 1:
                log.warning("%s: aliases point to generations %s; taking the newest", self.prefix, sorted(pointed))
            return max(pointed)
        return 0 if self.physical.get(0) else 1

    def names(self, generation: int) -> set[str]:
        """The collections readers see (the active generation), or those of another generation."""
        if generation == self.active and self.aliases:
            return set(self.aliases)
        return set(self.physical.get(generation, ()))


def server_sets(client: Any, prefix: str) -> ServerSets:
    """What the server holds for ``prefix`` (``client``: a QdrantClient or QdrantNodes)."""
    collections = [c.name for c in client.get_collections().collections]
    sets = ServerSets(prefix, by_generation(prefix, collections))
    for alias in client.get_aliases().aliases:
        parsed = parse_collection(prefix, alias.collection_name)
        if alias.alias_name.startswith(prefix) and parsed and parsed[1] == alias.alias_name[len(prefix) :]:
            sets.aliases[parsed[1]] = parsed[0]
    return sets


def point_aliases(client: Any, prefix: str, generation: int, names: set[str], *, replace: set[str]) -> None:
    """``<prefix><name>`` made an alias of generation ``generation``'s collection for each of
    ``names``, the aliases in ``replace`` deleted first: ONE request, applied atomically."""
    from qdrant_client import models

    ops: list[Any] = [
        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=prefix + n)) for n in sorted(replace)
    ]
    gen_prefix = collection_prefix(prefix, generation)
    ops += [
        models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=gen_prefix + n, alias_name=prefix + n)
        )
        for n in sorted(names)
    ]
    client.update_collection_aliases(change_aliases_operations=ops)


def _switch_server(settings: Settings, generation: int, drop_legacy: bool) -> int:
    store = _server_store(settings)
    try:
        client, prefix = store.client, settings.qdrant_collection_prefix
        sets = server_sets(client, prefix)
        previous = sets.active
        if generation == previous and (sets.aliases or previous == 0):
            return previous
        target = _complete(sets.physical.get(generation, set()), sets.names(previous), generation, previous)
        legacy = sets.physical.get(0, set()) & target
        if legacy and not drop_legacy:
            raise ValueError(
                f"{prefix!r} holds collections made before generations "
                f"({', '.join(sorted(prefix + n for n in legacy))}): "
                "an alias cannot take the name of an existing collection, so switching away from them cannot be "
                "atomic. Switch with drop_legacy=True to delete them and then "
                "create the aliases: readers find no collection in between"
            )
        for name in sorted(legacy):
            log.warning(
                "deleting the legacy collection %s%s: its name becomes generation %d's alias", prefix, name, generation
            )
            client.delete_collection(prefix + name)
        point_aliases(client, prefix, generation, target, replace=set(sets.aliases) & target)
        return previous
    finally:
        store.close()


def _complete(target: set[str], active: set[str], generation: int, previous: int) -> set[str]:
    if not target:
        raise ValueError(f"generation {generation} has no collection")
    missing = active - target
    if missing:
        raise ValueError(
            f"generation {generation} lacks {', '.join(sorted(missing))}, which the active generation "
            f"{previous} has: build it completely first"
        )
    return target


def _server_store(settings: Settings) -> Any:
    return open_store_generation(settings, None)


# -- the API --------------------------------------------------------------------------------------
def active_generation(settings: Settings) -> int:
    """The generation workers read and write now; 0 = a store made before generations."""
    if settings.qdrant_url:
        store = _server_store(settings)
        try:
            return server_sets(store.client, settings.qdrant_collection_prefix).active
        finally:
            store.close()
    return read_pointer(settings.store_path)


def store_generations(settings: Settings) -> list[int]:
    """The generations that have at least one collection, sorted."""
    if settings.qdrant_url:
        store = _server_store(settings)
        try:
            return sorted(server_sets(store.client, settings.qdrant_collection_prefix).physical)
        finally:
            store.close()
    from . import embedded_collections

    return sorted(by_generation(COLLECTION_PREFIX, embedded_collections(settings.store_path)))


def switch_generation(settings: Settings, generation: int, *, drop_legacy: bool = False) -> int:
    """Make ``generation`` the active set of every memstream collection at once; the previous
    generation is returned. Refused (ValueError) where ``generation`` lacks a collection the active
    one has. Embedded: call it inside ``with exclusive_store(settings):``, with no store of
    ``generation`` open (``drop_legacy`` is for a server only: nothing embedded needs dropping)."""
    collection_prefix(COLLECTION_PREFIX, generation)  # a valid generation
    if settings.qdrant_url:
        return _switch_server(settings, generation, drop_legacy)
    folder = settings.store_path.resolve()
    if folder not in _EXCLUSIVE:
        raise RuntimeError(f"switch the embedded store at {folder} inside `with exclusive_store(settings):`")
    previous = read_pointer(folder)
    if generation == previous:
        return previous
    from . import embedded_collections

    sets = by_generation(COLLECTION_PREFIX, embedded_collections(folder))
    _complete(sets.get(generation, set()), sets.get(previous, set()), generation, previous)
    held = take_lock(folder / generation_lock(generation), f"generation {generation} is open: close its store first")
    try:
        write_pointer(folder, generation)
    finally:
        release_lock(held)
    log.info("%s: generation %d is active (was %d)", folder, generation, previous)
    return previous


def drop_generation(settings: Settings, generation: int) -> int:
    """Delete generation ``generation``'s collections (the active one is refused); how many were
    dropped. Embedded: StoreLocked where a process has that generation open."""
    active = active_generation(settings)
    if generation == active:
        raise ValueError(f"generation {generation} is the active one: switch to another before dropping it")
    if settings.qdrant_url:
        store = _server_store(settings)
        try:
            names = server_sets(store.client, settings.qdrant_collection_prefix).physical.get(generation, set())
        finally:
            store.close()
    else:
        from . import embedded_collections

        names = by_generation(COLLECTION_PREFIX, embedded_collections(settings.store_path)).get(generation, set())
    if not names:
        return 0
    store = open_store_generation(settings, generation)
    try:
        return sum(store.drop_collection(name) for name in sorted(names))
    finally:
        store.close()


# -- opening ------------------------------------------------------------------------------------
def open_store_generation(settings: Settings, generation: int | None) -> Any:
    """open_store's work (see there); the embedded store's locks and pointer are read here."""
    if settings.qdrant_url:
        from .qdrant_store import QdrantStore, ServerLayout

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        layout = ServerLayout(
            shards=settings.qdrant_shards,
            replication_factor=settings.qdrant_replication_factor,
            write_consistency=settings.qdrant_write_consistency,
        )
        return QdrantStore(
            url=settings.qdrant_url,
            api_key=api_key,
            layout=layout,
            prefix=settings.qdrant_collection_prefix,
            generation=generation,
        )
    if settings.qdrant_embedded == "edge":
        return _open_edge(settings.store_path, generation)
    return _open_local(settings.store_path, generation)


def _open_edge(folder: Path, generation: int | None) -> VectorStore:
    from .qdrant_edge_store import QdrantEdgeStore

    for _ in range(5):
        active = read_pointer(folder)
        n = active if generation is None else generation
        # The active generation is what workers open: its store holds the folder's main lock too.
        locks = (WORKER_LOCK, generation_lock(n)) if n == active else (generation_lock(n),)
        store = QdrantEdgeStore(folder, prefix=collection_prefix(COLLECTION_PREFIX, n), locks=locks)
        if n != active or read_pointer(folder) == active:  # moved only under .lock, which it holds now
            return store
        store.close()  # switched between reading the pointer and taking the lock: read it again
    raise StoreLocked(f"the store at {folder} keeps switching generations")


def _open_local(folder: Path, generation: int | None) -> VectorStore:
    from .qdrant_store import QdrantStore

    for _ in range(5):
        active = read_pointer(folder)
        n = active if generation is None else generation
        try:
            store = QdrantStore(path=folder, prefix=collection_prefix(COLLECTION_PREFIX, n))
        except RuntimeError as exc:  # qdrant-client's local mode locks the whole folder (.lock) to one client
            if "already accessed" in str(exc):
                raise StoreLocked(
                    f"{exc} (qdrant-client's local mode opens one generation at a time: stop the workers to "
                    "build another, or use Qdrant Edge)"
                ) from exc
            raise
        if read_pointer(folder) == active:
            return store
        store.close()
    raise StoreLocked(f"the store at {folder} keeps switching generations")
