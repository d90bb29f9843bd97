"""The glibc < 2.38 workaround for llama-cpp-py-sync's bundled libraries (memstream.localllm.native),
on the real libraries of the installed wheel. Loading them is checked in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memstream.localllm import native

OLD_GLIBC = (2, 36)  # Debian 12


def bundled(name: str) -> Path:
    return native._bundled_dir() / name


def test_version_tuples() -> None:
    assert native.too_new("GLIBC_2.38", OLD_GLIBC)
    assert not native.too_new("GLIBC_2.2.5", OLD_GLIBC)
    assert not native.too_new("GLIBCXX_3.4.99", OLD_GLIBC)  # libstdc++'s versions are not glibc's


def test_patch_redirects_only_the_c23_imports() -> None:
    data = bytearray(bundled("libllama.so").read_bytes())
    before = {s.name: s.version for s in native._Elf(data).imports()}
    if not any(native.too_new(v, OLD_GLIBC) for v in before.values()):
        pytest.skip("this llama-cpp-py-sync build does not need glibc 2.38")
    changed = native.patch_library(data, OLD_GLIBC)
    assert changed and all(line.startswith("__isoc23_") for line in changed)
    after = {s.name: s.version for s in native._Elf(data).imports()}
    assert not any(native.too_new(v, OLD_GLIBC) for v in after.values())
    assert "strtol" in after and "__isoc23_strtol" not in after
    assert ("__isoc99_sscanf" in after) == ("__isoc23_sscanf" in before)
    untouched = {k: v for k, v in before.items() if not native.too_new(v, OLD_GLIBC)}
    assert untouched.items() <= after.items()
    assert native.patch_library(bytearray(bundled("libllama.so").read_bytes()), (2, 99)) == []


def test_a_too_new_symbol_that_is_not_c23_is_refused() -> None:
    data = bytearray(bundled("libllama.so").read_bytes())
    with pytest.raises(native.NativeLibraryError, match="newer than this glibc"):
        native.patch_library(data, (2, 3))  # pretend a glibc older than everything it imports


def test_compatible_library_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "glibc_version", lambda: (2, 99))
    assert native.compatible_library_dir(tmp_path) is None
    monkeypatch.setattr(native, "glibc_version", lambda: OLD_GLIBC)
    folder = native.compatible_library_dir(tmp_path)
    if folder is None:
        pytest.skip("this llama-cpp-py-sync build does not need glibc 2.38")
    assert native.compatible_library_dir(tmp_path) == folder  # made once
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in native._libraries(native._bundled_dir()))
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no leftover work folder


@pytest.mark.skipif((native.glibc_version() or (9,)) >= (2, 38), reason="the wheel's own libraries load here")
def test_patched_libraries_load_and_run_on_this_old_glibc(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from memstream.localllm import native;"
        "native.use_compatible_libraries(Path(sys.argv[1]));"
        "from llama_cpp_py_sync._cffi_bindings import get_lib; lib = get_lib(); lib.llama_backend_init();"
        "print(lib.llama_max_devices() >= 1)"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
