"""The numba and llvmlite releases this package works with; importing `codegen` fails outside them.

codegen/linker.py and codegen/numba_cache.py use numba internals (the data model of a first-class
function type, a dispatcher's compiled library, the cache's index file), marked "numba-internal"
where they do. numba changes those between releases without notice, and a change would show as
wrong results or a crash in generated code, not as an error. So the supported range is the releases
we have tested, pinned in pyproject.toml as well, and `import codegen` (which every compiled model
imports) checks the installed versions against it, before anything of numba's is patched or used.
To support another release: test it, then widen SUPPORTED and pyproject.toml's pins together.
"""

from __future__ import annotations

import re

# package: (lowest supported release, first release not supported), as in pyproject.toml's pins
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "numba": ((0, 68), (0, 69)),
    "llvmlite": ((0, 50), (0, 51)),
}


class UnsupportedNumbaError(ImportError):
    """The installed numba or llvmlite is outside the releases this package is tested with."""


def release(version: str) -> tuple[int, ...] | None:
    """The release numbers of a version string ('0.68.1' -> (0, 68, 1); '0.69.0rc1' -> (0, 69, 0)),
    None if it does not start with one."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group().split(".")) if match else None


def requirement(package: str) -> str:
    """pip's spelling of the supported range of `package`: 'numba>=0.68,<0.69'."""
    low, high = SUPPORTED[package]
    return f"{package}>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def check_versions(versions: dict[str, str]) -> None:
    """Raise UnsupportedNumbaError naming every package of `versions` (name: version string) outside
    its supported range, the supported ranges and the pip command that installs them."""
    wrong = []
    for package, version in versions.items():
        low, high = SUPPORTED[package]
        number = release(version)
        if number is None or not low <= number < high:
            wrong.append(f"{package} {version}")
    if wrong:
        wanted = [requirement(package) for package in SUPPORTED]
        command = "pip install " + " ".join(f'"{spec}"' for spec in wanted)
        installed = " and ".join(wrong) + (" is" if len(wrong) == 1 else " are")
        raise UnsupportedNumbaError(
            f"pnnx-jit supports {' and '.join(wanted)}, but {installed} installed "
            f"(codegen/ relies on numba internals that change between releases). Fix: {command}"
        )


def check_installed() -> None:
    """check_versions() on the numba and llvmlite this process imports."""
    import llvmlite
    import numba

    check_versions({"numba": numba.__version__, "llvmlite": llvmlite.__version__})
