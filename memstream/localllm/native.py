"""Make llama-cpp-py-sync's bundled llama.cpp libraries load on glibc older than 2.38 (Debian 12 has 2.36).

The wheel is tagged manylinux2014 but was linked against glibc 2.38: its libraries import the C23
``__isoc23_strtol``/``strtoul``/``strtoull``/``sscanf`` (GLIBC_2.38), so ``dlopen`` fails with "version
`GLIBC_2.38' not found" on an older glibc. Those four differ from the classic functions only in also
reading ``0b`` binary literals, which llama.cpp never parses, so on such a system we copy the libraries
to a cache folder and redirect each of these imports to its classic twin: ``strtol`` etc. (the tail of
the same name in the string table) and ``__isoc99_sscanf`` ("23" -> "99" in place). The symbol's
version becomes "any" and the GLIBC_2.38 requirement is marked weak, so the loader no longer insists on
it. Any other symbol that needs a glibc newer than the running one is refused: that would be a real
incompatibility, not a naming one. On glibc >= 2.38 nothing happens.
"""

from __future__ import annotations

import platform
import shutil
import struct
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from memstream.cache import cache_dir as cache_dir_of
from memstream.cache import made_once

_C23_PREFIX = "__isoc23_"
_SHT_DYNSYM = 11
_SHT_GNU_VERNEED = 0x6FFFFFFE
_SHT_GNU_VERSYM = 0x6FFFFFFF
_VER_FLG_WEAK = 0x2
_VER_NDX_GLOBAL = 1


class NativeLibraryError(RuntimeError):
    """The bundled libraries cannot be made to load on this system."""


def glibc_version() -> tuple[int, ...] | None:
    """The running glibc's version, or None when the C library is not glibc."""
    lib, version = platform.libc_ver()
    if lib != "glibc" or not version:
        return None
    return _version_tuple(version)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


@dataclass(frozen=True)
class _Section:
    type: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True)
class _Import:
    index: int  # in .dynsym (and .gnu.version)
    name: str
    name_offset: int  # into .dynstr
    version: str  # e.g. "GLIBC_2.38"; "" when unversioned or not from a known need


class _Elf:
    """Just enough of a little-endian ELF64 shared object: its dynamic symbols and their versions."""

    def __init__(self, data: bytearray):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise NativeLibraryError("not a little-endian ELF64 file")
        self.data = data
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            _, sh_type, _, _, offset, size, link = struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize)
            self.sections.append(_Section(sh_type, offset, size, link))
        self.dynsym = self._one(_SHT_DYNSYM)
        self.dynstr = self.sections[self.dynsym.link]
        self.versym = self._one(_SHT_GNU_VERSYM)
        self.verneed = self._one(_SHT_GNU_VERNEED)

    def _one(self, sh_type: int) -> _Section:
        found = [s for s in self.sections if s.type == sh_type]
        if len(found) != 1:
            raise NativeLibraryError(f"expected one section of type {sh_type:#x}, found {len(found)}")
        return found[0]

    def string(self, offset: int) -> str:
        start = self.dynstr.offset + offset
        return self.data[start : self.data.index(b"\0", start)].decode()

    def version_needs(self) -> dict[int, tuple[int, str]]:
        """Version index -> (file offset of its Vernaux entry, version name)."""
        needs: dict[int, tuple[int, str]] = {}
        offset = self.verneed.offset
        while True:
            _, count, _, aux, next_need = struct.unpack_from("<HHIII", self.data, offset)
            entry = offset + aux
            for _ in range(count):
                _, _, index, name, next_aux = struct.unpack_from("<IHHII", self.data, entry)
                needs[index] = (entry, self.string(name))
                entry += next_aux
            if not next_need:
                return needs
            offset += next_need

    def imports(self) -> list[_Import]:
        needs = self.version_needs()
        found = []
        for index in range(self.dynsym.size // 24):
            entry = self.dynsym.offset + index * 24
            name_offset, _, _, shndx = struct.unpack_from("<IBBH", self.data, entry)
            if shndx != 0 or not name_offset:  # defined here, or the null symbol
                continue
            (version_index,) = struct.unpack_from("<H", self.data, self.versym.offset + 2 * index)
            version = needs.get(version_index & 0x7FFF, (0, ""))[1]
            found.append(_Import(index, self.string(name_offset), name_offset, version))
        return found


def too_new(version: str, running: tuple[int, ...]) -> bool:
    """A GLIBC_x.y requirement the running glibc does not provide."""
    return version.startswith("GLIBC_") and _version_tuple(version.removeprefix("GLIBC_")) > running


def patch_library(data: bytearray, running: tuple[int, ...]) -> list[str]:
    """Redirect, in place, the imports of ``data`` (an ELF shared object) that need a glibc newer than
    ``running``; returns "old -> new" for each. Raises NativeLibraryError for one that is not a C23 twin."""
    elf = _Elf(data)
    changed = []
    for symbol in elf.imports():
        if not too_new(symbol.version, running):
            continue
        if not symbol.name.startswith(_C23_PREFIX):
            raise NativeLibraryError(f"{symbol.name} needs {symbol.version}, newer than this glibc")
        if symbol.name.endswith("scanf"):
            # __isoc99_sscanf (glibc 2.7) is the C99 twin; the plain sscanf has GNU %a semantics.
            at = elf.dynstr.offset + symbol.name_offset + len("__isoc")
            data[at : at + 2] = b"99"
            new_name = elf.string(symbol.name_offset)
        else:
            # strtol is the tail of "__isoc23_strtol": point the symbol's name there.
            new_offset = symbol.name_offset + len(_C23_PREFIX)
            struct.pack_into("<I", data, elf.dynsym.offset + symbol.index * 24, new_offset)
            new_name = elf.string(new_offset)
        struct.pack_into("<H", data, elf.versym.offset + 2 * symbol.index, _VER_NDX_GLOBAL)
        changed.append(f"{symbol.name} -> {new_name}")
    for entry, name in elf.version_needs().values():
        if too_new(name, running):
            (flags,) = struct.unpack_from("<H", data, entry + 4)
            struct.pack_into("<H", data, entry + 4, flags | _VER_FLG_WEAK)
    return changed


def needs_patch(library: Path, running: tuple[int, ...]) -> bool:
    try:
        elf = _Elf(bytearray(library.read_bytes()))
    except NativeLibraryError:  # no symbol versions to read: nothing we could patch either
        return False
    return any(too_new(name, running) for _, name in elf.version_needs().values())


def _bundled_dir() -> Path:
    spec = find_spec("llama_cpp_py_sync")
    if spec is None or not spec.submodule_search_locations:
        raise NativeLibraryError("llama-cpp-py-sync is not installed: pip install llama-cpp-py-sync")
    return Path(next(iter(spec.submodule_search_locations)))


def _libraries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith("lib") and ".so" in p.name)


def compatible_library_dir(cache_dir: Path | None = None) -> Path | None:
    """The folder to load llama.cpp from: None for the wheel's own (this glibc is new enough, or this
    is not glibc), else a cache folder with patched copies, made once per wheel build and glibc."""
    running = glibc_version()
    bundled = _bundled_dir()
    libraries = _libraries(bundled)
    if running is None or not any(needs_patch(lib, running) for lib in libraries):
        return None
    stamp = f"{bundled.stat().st_mtime_ns}-{sum(lib.stat().st_size for lib in libraries)}"
    target = (cache_dir or cache_dir_of("native")) / f"llama-cpp-py-sync-{stamp}-glibc{'.'.join(map(str, running))}"

    def patched_copies(folder: Path) -> None:
        folder.mkdir()
        for lib in libraries:
            data = bytearray(lib.read_bytes())
            patch_library(data, running)
            (folder / lib.name).write_bytes(data)
            shutil.copymode(lib, folder / lib.name)

    # Made beside the target and renamed into place: concurrent starts never load a half-written copy.
    return made_once(target, patched_copies)


def use_compatible_libraries(cache_dir: Path | None = None) -> Path | None:
    """Point llama-cpp-py-sync at patched libraries when this glibc needs them; call before the first
    ``Llama``. Returns the folder used, None for the wheel's own."""
    global _in_use
    folder = compatible_library_dir(cache_dir)
    if folder is None or folder == _in_use:
        return folder
    from llama_cpp_py_sync import _cffi_bindings

    if _cffi_bindings._lib is not None:
        raise NativeLibraryError("llama.cpp was loaded before its libraries were made compatible")
    library = str(folder / "libllama.so")
    # The bindings look in their own package folder first; _find_library is their one lookup for
    # libllama (and the folder of the ggml libraries beside it).
    _cffi_bindings._find_library = lambda: library
    _in_use = folder
    return folder


_in_use: Path | None = None  # the folder this process loads llama.cpp from, once chosen
