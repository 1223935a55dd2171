"""Import Python source generated at run time from a real file, so numba can cache what it defines.

numba's `cache=True` keys a function on its source file: source exec'd from a string cannot be
cached. `import_generated` writes the source to `<dir>/<module>_<digest>.py` (once: the digest
names the content, so a file found there is the same source) and imports it under `name`.

The directory is stable across processes and runs, so numba's cache beside the file is found
again: `$PNNX_JIT_KERNEL_DIR`, else the user cache directory's `kernels/` (platformdirs), else,
when that cannot be written, a directory under the system's temporary directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def generated_dir() -> Path:
    """Where generated kernel modules are written (created if missing)."""
    override = os.environ.get("PNNX_JIT_KERNEL_DIR")
    if override:
        candidates = [Path(override)]
    else:
        import platformdirs

        candidates = [Path(platformdirs.user_cache_dir("pnnx-jit")) / "kernels",
                      Path(tempfile.gettempdir()) / f"pnnx-jit-kernels-{os.getuid() if hasattr(os, 'getuid') else 0}"]
    for directory in candidates:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if os.access(directory, os.W_OK):
                return directory
        except OSError:
            continue
    raise OSError(f"no writable directory for generated kernels among {', '.join(map(str, candidates))}")


def import_generated(name: str, source: str) -> ModuleType:
    """The module `name` defined by `source`, imported from a file named by the source's digest."""
    if name in sys.modules:
        return sys.modules[name]
    digest = hashlib.blake2b(source.encode(), digest_size=8).hexdigest()
    path = generated_dir() / f"{name.rsplit('.', 1)[-1]}_{digest}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)  # atomic: a process importing it meanwhile sees all of it or nothing
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
