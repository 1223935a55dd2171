"""The ahead-of-time cache: compiled models that reload without recompiling.

An entry is a directory named by the key, holding everything a compiled model
needs besides the kernel library: the generated module (numba keeps its machine
code in __pycache__ beside it), the optimised IR, the packed weights (one .npy
per dtype, memory-mapped on load) and meta.json, which records the key's inputs,
the compile time and the size, mtime and checksum of every file. The key hashes
the .param and .bin bytes, our version and the sources that generate code
(code_sources: not the command line, say), numba/llvmlite/numpy/Python versions,
the CPU numba compiles for, and every option that changes the generated code.

A warm load must stay cheap (bench/warm_load.py), so large files are not read
in full on every load: a model's .bin digest is memoised in the cache directory
by its path and stat (size, mtime, ctime, inode), and an entry's large files are
verified by size and mtime (truncation or rewriting changes them; a copy with a
new mtime is hashed). Small files (forward.py, graph.ir) are hashed every time.

Writes are atomic and locked: an entry is built in a temporary directory and
renamed into place under a file lock, so concurrent compiles of one model leave
one valid entry, and a compile killed half-way leaves a temporary directory that
the next eviction removes, never a partial entry. An entry whose files fail their
checks (truncated, edited, swapped for another entry's: meta.json names its key)
is reported at debug level and rebuilt before anything of it is imported or
unpickled; a cache in a directory other users can write to is not used.

What the cache trusts: its directory, which must belong to the user and be writable
by nobody else (untrusted_reason). Checksums catch corruption, partial writes and
edits by mistake; they do not stop a program running as the same user, which could
as well edit this package's own sources.

Weights are stored once: each entry's weight packs are hard links to files of
weights/ named by their digest, so the specializations of one model (other batch
sizes, fetches) and its rebuilds after a code change share them. The cache keeps
to max_bytes (PNNX_JIT_CACHE_MAX_BYTES, default 4 GiB), evicting the entries used
least recently (their meta.json's mtime, set at every load) after each new entry;
weights no entry links to any more go with them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

CACHE_ENV = "PNNX_JIT_CACHE_DIR"
MAX_BYTES_ENV = "PNNX_JIT_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
FORMAT = 5  # bump when the entry layout changes
BIG_FILE = 1 << 20  # bytes: files at least this large are verified by stat, not hashed on every load
RACY_SECONDS = 2.0  # a file changed this recently may change again within one timestamp tick
MEMO_ENTRIES = 256  # digests kept in the memo; the oldest go first


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs  # only when needed: a warm load pays for every import

    return Path(platformdirs.user_cache_dir("pnnx-jit"))


@dataclass
class CacheInfo:
    """What the cache did for one compile: `m.cache_info`."""

    hit: bool
    key: str
    path: Path | None
    compile_seconds: float  # time the entry took to build (when it was built)
    load_seconds: float  # time this process spent loading or building it
    reason: str = ""  # why the cache was not used, if it was not


def _new_digest():
    # the digest of weights files (50-400 MB an entry) and of the model's .bin: sha256 runs at 1.5 GB/s
    # where the CPU has SHA extensions (every AMD Zen, Intel since Ice Lake), blake2b at 0.6 (AVX2 VM);
    # 0.2 s of ResNet-18's cold compile at batch 8
    return hashlib.sha256()


def file_digest(path: Path) -> str:
    h = _new_digest()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class _DigestingFile:
    """A binary file being written whose bytes are hashed as they go out, as file_digest() reads them."""

    def __init__(self, file: BinaryIO):
        self.file, self.digest = file, _new_digest()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.file.write(data)


def write_digested(path: Path, write: Callable[[BinaryIO], None]) -> str:
    """Write `path` with write(file); return its file_digest(), computed on the way out rather than by
    reading the file again (a cache entry's weights: 50-100 MB)."""
    with open(path, "wb") as f:
        digesting = _DigestingFile(f)
        write(digesting)
    return digesting.digest.hexdigest()


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """Which bytes a stat names, for digests computed during one build: device, inode, size, mtime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def file_record(path: Path, known: dict[tuple, str] | None = None) -> dict:
    """What load() checks a file of an entry against: its size, mtime and digest when written.
    known: digests this build already computed, by file_identity (the weights, hashed as they were written:
    write_digested, share())."""
    st = path.stat()
    digest = (known or {}).get(file_identity(st)) or file_digest(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": digest}


def file_problem(path: Path, record: dict) -> str | None:
    """Why `path` is not the file `record` describes, or None.

    A size change (truncation) is caught by stat alone. A large file whose mtime is
    unchanged since it was written is trusted without reading it: the entry directory
    is ours alone (untrusted_reason), and hashing a model's weights on every load
    would cost more than the rest of the load. Everything else is hashed."""
    st = path.stat()
    if st.st_size != record["size"]:
        return f"{path.name} does not match its checksum: {st.st_size} bytes, {record['size']} expected"
    if st.st_size >= BIG_FILE and st.st_mtime_ns == record["mtime_ns"]:
        return None
    if file_digest(path) != record["digest"]:
        return f"{path.name} does not match its checksum"
    return None


class DigestMemo:
    """Digests of large files, remembered by path and stat so a warm load does not reread them.

    The key of a model hashes its .bin (tens of MB), which would otherwise be read in
    full on every compile() call. An entry is reused only when the file's path, size,
    mtime, ctime, inode and device are all unchanged; ctime cannot be set back by the
    user (unlike mtime), so any rewrite of the file invalidates the entry. A file changed
    within RACY_SECONDS is not memoised: a second change in the same timestamp tick
    would otherwise leave its stat identical (git's "racy" index entries)."""

    def __init__(self, path: Path):
        self.path = path

    def digest(self, file: Path) -> str:
        st = file.stat()
        if st.st_size < BIG_FILE:
            return file_digest(file)
        name = str(file.resolve())
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        memo = self._read()
        known = memo.get(name)
        if isinstance(known, list) and known[:-1] == stamp and isinstance(known[-1], str):
            return known[-1]
        digest = file_digest(file)
        if time.time() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 > RACY_SECONDS:
            memo.pop(name, None)
            memo[name] = [*stamp, digest]
            self._write(dict(list(memo.items())[-MEMO_ENTRIES:]))
        return digest

    def _read(self) -> dict[str, list]:
        try:
            memo = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return memo if isinstance(memo, dict) else {}

    def _write(self, memo: dict[str, list]) -> None:
        """Atomically (temp file + rename); when two processes race, the last one wins,
        and the other's digest is simply computed again next time."""
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        try:
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.debug("cannot write the digest memo %s: %s", self.path, exc)


def _cpu_signature() -> str:
    """The machine numba compiles for, as numba keys its own cache: target triple, CPU name and
    features of its codegen, which honours NUMBA_CPU_NAME and NUMBA_CPU_FEATURES (CI compiles for
    haswell on any host) and asks LLVM for the host's only when they are unset; and
    PNNX_JIT_VECTOR_WIDTH where it is set, which changes the code generated (blocks, panels).

    codegen.runtime comes first: it sets numba's target features (512-bit vectors where the host
    has AVX-512F) before anything builds numba's target, and building it here would fix the
    features for the whole process: the key (and the kernels) would then depend on whether this
    process imported codegen before its first compile()."""
    from numba.core.registry import cpu_target

    import codegen.runtime  # noqa: F401 - numba's target features, before the target is built

    triple, name, features = cpu_target.target_context.codegen().magic_tuple()
    forced = os.environ.get("PNNX_JIT_VECTOR_WIDTH")  # the kernels' vector width, forced (vectors.vector_width)
    return f"{triple}|{name}|{features}" + (f"|vector={forced}" if forced else "")


SOURCE_ROOT = Path(__file__).resolve().parents[1]
CODE_PACKAGES = ("ir", "compiler", "codegen")
#: modules of CODE_PACKAGES that change neither the code generated for a model nor what a cache
#: entry holds, so editing them keeps every entry valid (anything else there, new modules too, is
#: keyed: a needless miss costs a compile, a stale hit runs old code)
NOT_CODE = {
    "compiler/__init__.py": "re-exports; __version__ is in the key on its own",
    "compiler/__main__.py": "the command line",
    "compiler/cli.py": "the command line",
    "compiler/cache.py": "this file: its layout is keyed by FORMAT, the key by its material",
    "compiler/interpreter.py": "the reference backend, which is never cached",
    "compiler/model.py": "the call surface: input checks at run time",
    "codegen/__init__.py": "import-time setup: numba's cache saves locked (numba_cache)",
    "codegen/numba_cache.py": "locks numba's cache saves",
    "codegen/runtime.py": "the process's thread and allocator settings",
}


def code_sources(root: Path = SOURCE_ROOT) -> list[Path]:
    """The sources whose change must miss the cache: every module of CODE_PACKAGES under root
    (the IR and its ops, pnnx reading, lowering, passes, compile()'s options and pipeline, the
    numba backend's entry writer, emit rules, emitter, linker, memory plan, kernels) but NOT_CODE."""
    return [path for package in CODE_PACKAGES for path in sorted((root / package).rglob("*.py"))
            if path.relative_to(root).as_posix() not in NOT_CODE]


@functools.cache
def code_digest(root: Path = SOURCE_ROOT) -> str:
    """A hash of code_sources(root): a change to the code that generates a module misses the cache,
    even before the version number moves."""
    h = hashlib.blake2b(digest_size=16)
    for path in code_sources(root):
        data = path.read_bytes()
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def cache_key(param: Path, bin_path: Path | None, options: dict,
              digest: Callable[[Path], str] = file_digest) -> str:
    """The key of a compiled model: its bytes, every version that matters, the CPU, the options.

    digest(path) hashes the model's files (ModelCache.model_digest memoises large ones)."""
    import llvmlite
    import numba
    import numpy

    import compiler

    material = {
        "format": FORMAT,
        "param": digest(param),
        "bin": digest(bin_path) if bin_path is not None and bin_path.exists() else None,
        "ours": compiler.__version__,
        "code": code_digest(SOURCE_ROOT),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "numpy": numpy.__version__,
        "python": sys.version,
        "platform": platform.platform(),
        "cpu": _cpu_signature(),
        "options": options,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]


def untrusted_reason(path: Path) -> str | None:
    """Why `path` (a directory) must not be trusted: writable by others or owned by someone else."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot stat {path}: {exc}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by other users"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to another user"
    return None


def default_max_bytes() -> int:
    setting = os.environ.get(MAX_BYTES_ENV, "").strip()
    if setting.isdigit():
        return int(setting)
    if setting:
        log.warning("ignoring $%s=%r: not a whole number of bytes", MAX_BYTES_ENV, setting)
    return DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class Entry:
    """One entry, as `cache list` shows it."""

    key: str
    meta: dict | None  # None: incomplete (a build under way, or killed)
    size: int  # bytes of its files, shared weights included
    last_used: float  # seconds since the epoch: its last load or build


class ModelCache:
    """Entries under `root`, one directory per key, and the weights they share; at most max_bytes."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes
        # digests share() computed for the entry being built, by file_identity: its record reuses them
        # rather than hash a weights file of 50-100 MB again
        self._shared_digests: dict[tuple, str] = {}

    def entry_dir(self, key: str) -> Path:
        return self.root / "models" / key

    def model_digest(self, path: Path) -> str:
        """file_digest(path), memoised for large files (only call once usable() returned None)."""
        return DigestMemo(self.root / "digests.json").digest(path)

    def usable(self) -> str | None:
        """None if the cache can be used, else the reason it cannot."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if reason := untrusted_reason(self.root):
                return reason
            (self.root / "models").mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            return f"cannot create {self.root}: {exc}"
        return untrusted_reason(self.root / "models")

    def load(self, key: str) -> dict | None:
        """The entry's meta if it exists and every file checks out; a bad entry is removed."""
        path = self.entry_dir(key)
        meta_path = path / "meta.json"
        if not meta_path.exists():
            return None
        problem = untrusted_reason(path)
        if problem is None:
            try:
                meta = json.loads(meta_path.read_text())
                if meta.get("key") != key:  # another entry's files (meta.json included) moved here
                    problem = f"it holds the entry of key {meta.get('key')!r}"
                for name, record in meta["files"].items():
                    if problem or (problem := file_problem(path / name, record)):
                        break
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                problem = f"unreadable entry: {exc}"
        if problem is None:
            try:
                os.utime(meta_path)  # its last use, for eviction
            except OSError:  # a read-only cache still loads
                pass
            return meta
        log.debug("cache entry %s is invalid (%s); rebuilding it", path, problem)
        shutil.rmtree(path, ignore_errors=True)
        return None

    def get_or_build(self, key: str, build: Callable[[Path], dict]) -> tuple[dict, bool]:
        """(meta, hit). On a miss, build(tmp_dir) writes the entry's files and returns its meta."""
        meta = self.load(key)
        if meta is not None:
            return meta, True
        import filelock  # only on a miss: a warm load pays for every import

        lock = filelock.FileLock(str(self.root / "models" / f"{key}.lock"))
        with lock:
            meta = self.load(key)  # another process may have built it while we waited
            if meta is not None:
                return meta, True
            tmp = self.root / "models" / f".{key}{TMP_MARK}{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o700)
            self._shared_digests = {}
            try:
                start = time.perf_counter()
                meta = build(tmp)
                meta["key"] = key
                meta["build_seconds"] = time.perf_counter() - start
                meta["files"] = {p.name: file_record(p, self._shared_digests)
                                 for p in sorted(tmp.iterdir()) if p.is_file()}
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks completeness
                final = self.entry_dir(key)
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
            finally:
                self._shared_digests = {}
                shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.evict(keep=key)
        except OSError as exc:  # best effort: the entry is built
            log.debug("cache eviction in %s failed: %s", self.root, exc)
        return meta, False

    def share(self, path: Path, digest: str | None = None) -> None:
        """Make `path` (a file of an entry being built) a hard link to the copy of its bytes in weights/,
        putting it there first if no entry has a sound one (a copy whose bytes no longer match its name,
        edited through another entry's link, is replaced); where the file system has no hard links, the
        entry keeps its own copy. digest: its file_digest(), when the writer computed it (write_digested)."""
        store = self.root / "weights"
        digest = digest or file_digest(path)
        shared = store / f"{digest}{path.suffix}"
        link = path.with_name(f".{path.name}.link")
        try:
            store.mkdir(exist_ok=True, mode=0o700)
            if shared.exists() and file_digest(shared) == digest:
                os.link(shared, link)
                os.replace(link, path)
            else:  # publish this copy: a link under a temporary name, renamed over any unsound one
                publishing = store / f".{shared.name}.{os.getpid()}"
                os.link(path, publishing)
                os.replace(publishing, shared)
            self._shared_digests[file_identity(path.stat())] = digest
        except OSError as exc:
            link.unlink(missing_ok=True)
            log.debug("cannot share %s through %s: %s", path.name, store, exc)

    def entries(self) -> list[Entry]:
        """Every entry directory (complete or not), by key."""
        out = []
        models = self.root / "models"
        if not models.is_dir():
            return out
        for path in sorted(p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                files = [f for f in path.rglob("*") if f.is_file()]
                size = sum(f.stat().st_size for f in files)
                meta_path = path / "meta.json"
                meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
                last_used = (meta_path if meta_path.exists() else path).stat().st_mtime
            except (OSError, ValueError):  # removed meanwhile, or unreadable
                continue
            out.append(Entry(path.name, meta if isinstance(meta, dict) else None, size, last_used))
        return out

    def disk_bytes(self) -> int:
        """Bytes the cache takes on disk: every file once, however many entries link to it."""
        seen: set[tuple[int, int]] = set()
        total = 0
        for directory in (self.root / "models", self.root / "weights"):
            for f in directory.rglob("*") if directory.is_dir() else ():
                try:
                    st = f.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
        return total

    def evict(self, keep: str | None = None, max_bytes: int | None = None) -> list[str]:
        """Remove what compiles killed half-way left, then the least recently used entries (never `keep`)
        until the cache takes at most max_bytes (default self.max_bytes), then the weights no entry links
        to; return the keys removed. A process that loaded an entry keeps running it (its files stay
        mapped); one that was about to load it finds it gone and builds it again."""
        limit = self.max_bytes if max_bytes is None else max_bytes
        self._remove_abandoned_builds()
        self._collect_weights()
        removed = []
        total = self.disk_bytes()
        for entry in sorted((e for e in self.entries() if e.key != keep), key=lambda e: e.last_used):
            if total <= limit:
                break
            total -= self._remove_entry(entry)
            removed.append(entry.key)
        if removed:
            log.info("cache %s: removed %d least recently used entr%s to keep to %d bytes", self.root,
                     len(removed), "y" if len(removed) == 1 else "ies", limit)
        return removed

    def _remove_entry(self, entry: Entry) -> int:
        """Remove an entry and the shared weights only it linked to; return the bytes freed."""
        path = self.entry_dir(entry.key)
        freed = 0
        for f in path.rglob("*"):
            try:
                st = f.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                freed += st.st_size
        shutil.rmtree(path, ignore_errors=True)
        store = self.root / "weights"
        for name, record in (entry.meta or {}).get("files", {}).items():
            shared = store / f"{record.get('digest')}{Path(name).suffix}"
            try:
                st = shared.stat()
                if st.st_nlink <= 1:
                    shared.unlink()
                    freed += st.st_size
            except OSError:
                continue
        return freed

    def _collect_weights(self) -> None:
        """Remove the shared weights no entry links to (left by entries removed by hand, or killed builds)."""
        store = self.root / "weights"
        for f in store.iterdir() if store.is_dir() else ():
            try:
                st = f.stat()
                if f.name.startswith(".") and time.time() - st.st_mtime < STALE_SECONDS:
                    continue  # another process is publishing it
                if st.st_nlink <= 1:
                    f.unlink()
            except OSError:
                continue

    def _remove_abandoned_builds(self) -> None:
        """Temporary build directories of processes that no longer run (killed mid-compile)."""
        models = self.root / "models"
        for path in models.glob(f".*{TMP_MARK}*") if models.is_dir() else ():
            pid = path.name.rpartition(TMP_MARK)[2]
            if pid.isdigit() and not _process_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)

    def clear(self) -> int:
        """Remove every entry and the shared weights; return how many entries there were."""
        n = len(self.entries())
        shutil.rmtree(self.root / "models", ignore_errors=True)
        shutil.rmtree(self.root / "weights", ignore_errors=True)
        return n


TMP_MARK = ".tmp"  # an entry under construction: models/.<key>.tmp<pid>
STALE_SECONDS = 600.0


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: alive
        return True
    return True
