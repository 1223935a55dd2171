"""Mutated real pnnx files, and what every mutant must do: load and then run the same on the interpreter
and the compiled kernels (the executor for each, a numba forward for a sample), or raise one of our typed
errors, in bounded time and memory.

    python -m tests.fuzz_models --cases 100000 [--seed 1] [--numba-every 50]   # the long run; prints counts
    python -m tests.fuzz_models --cases 3000 --json   # one JSON line: counts, seconds, peak memory

Hypothesis draws the mutants (a corpus model, and the random choices of a mutation), so a failure is
shrunk to a simplest mutant before it is reported; tests/test_fuzz_models.py runs a fixed-seed few
thousand of them. The mutations are those of a
hand-edited file: a character of a token changed, a number edited (0, -1, huge, nan...), a line
deleted, duplicated or moved, two params swapped, the counts line edited; and of a damaged .bin: cut
short, bits flipped, an entry of the wrong size, an entry that inflates a thousandfold (a zip bomb).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import re
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import compiler
from compiler import CompilerError, NodeExecutionError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "compiler" / "data" / "tiny_cnn.pnnx.param"
ZOO_CORPUS = ["mlp", "transformer_block", "lstm_gru_mini", "shufflenet_v2_mini", "m5_audio_mini"]
RUN_LIMIT_BYTES = 256 << 20  # a mutant whose values would take more is loaded, not run (its inputs' size is the user's)
SECONDS_PER_CASE = 60.0  # a mutant that takes longer to load and run is a failure (a hang)


@dataclass(frozen=True)
class Seed:
    """One real model of the corpus: its files' contents."""

    name: str
    param: str
    bin: bytes


def corpus() -> list[Seed]:
    """The shipped demo and a few zoo models (exported with pnnx, cached)."""
    from bench.pnnx_export import export_zoo

    seeds = [Seed("tiny_cnn", SHIPPED.read_text(), SHIPPED.with_suffix(".bin").read_bytes())]
    for name in ZOO_CORPUS:
        param = export_zoo(name)
        seeds.append(Seed(name, param.read_text(), param.with_suffix(".bin").read_bytes()))
    return seeds


# -- mutations of the param text ----------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
NUMBERS = ["0", "-1", "1", "2", "3", "7", "-7", "65536", "2147483648", "1e30", "-1e30", "nan", "inf", "-0", "0.0"]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def flip_token(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    tokens = lines[i].split(" ")
    j = rng.randrange(len(tokens))
    token = tokens[j]
    k = rng.randrange(len(token) + 1)
    how = rng.randrange(3)
    char = rng.choice("0123456789()[],=@#$?-.eafx_ ")
    tokens[j] = token[:k] + char + token[k + (how == 0):] if how < 2 else token[:k] + token[k + 1:]
    lines[i] = " ".join(tokens)
    return "\n".join(lines)


def edit_number(text: str, rng: random.Random) -> str:
    found = list(_NUMBER.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    value = m.group()
    choices = NUMBERS + [str(int(float(value)) + d) for d in (-1, 1) if "." not in value and "e" not in value]
    return text[:m.start()] + rng.choice(choices) + text[m.end():]


def delete_line(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    del lines[rng.randrange(2, len(lines))]
    return "\n".join(lines)


def duplicate_line(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    i = rng.randrange(2, len(lines))
    lines.insert(rng.randrange(2, len(lines) + 1), lines[i])
    return "\n".join(lines)


def move_line(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    line = lines.pop(rng.randrange(2, len(lines)))
    lines.insert(rng.randrange(2, len(lines) + 1), line)
    return "\n".join(lines)


def swap_params(text: str, rng: random.Random) -> str:
    """Swap the values of two key=value params (on one line or two)."""
    params = [(i, j) for i, line in enumerate(_lines(text)) for j, t in enumerate(line.split(" "))
              if "=" in t and not t.startswith(("#", "@", "$"))]
    if len(params) < 2:
        return text
    (i1, j1), (i2, j2) = rng.sample(params, 2)
    lines = [line.split(" ") for line in _lines(text)]
    k1, _, v1 = lines[i1][j1].partition("=")
    k2, _, v2 = lines[i2][j2].partition("=")
    lines[i1][j1], lines[i2][j2] = f"{k1}={v2}", f"{k2}={v1}"
    return "\n".join(" ".join(t) for t in lines)


def edit_counts(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    ops, operands = lines[1].split()
    lines[1] = rng.choice([f"{int(ops) + 1} {operands}", f"{ops} {int(operands) - 1}", "0 0", f"{ops}", "x y"])
    return "\n".join(lines)


PARAM_MUTATIONS: list[Callable[[str, random.Random], str]] = [
    flip_token, edit_number, edit_number, delete_line, duplicate_line, move_line, swap_params, edit_counts]


# -- mutations of the bin ---------------------------------------------------------------------------------


def truncate_bin(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))]


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _rewrite(data: bytes, change: Callable[[zipfile.ZipInfo, bytes], tuple[bytes, int]], rng: random.Random) -> bytes:
    """The zip with one entry's data changed by change(info, data) -> (new data, compress_type)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    names = source.namelist()
    if not names:
        return data
    victim = rng.choice(names)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            payload = source.read(info.filename)
            kind = zipfile.ZIP_STORED
            if info.filename == victim:
                payload, kind = change(info, payload)
            target.writestr(info.filename, payload, compress_type=kind)
    return out.getvalue()


def wrong_size_entry(data: bytes, rng: random.Random) -> bytes:
    def change(info, payload):
        return (payload + bytes(rng.choice([1, 4, 64])) if rng.random() < 0.5 else payload[:-rng.choice([1, 4])],
                zipfile.ZIP_STORED)

    return _rewrite(data, change, rng)


def compressed_entry(data: bytes, rng: random.Random) -> bytes:
    """An entry deflated instead of stored (pnnx stores them): must still read right."""
    return _rewrite(data, lambda info, payload: (payload, zipfile.ZIP_DEFLATED), rng)


BIN_MUTATIONS: list[Callable[[bytes, random.Random], bytes]] = [truncate_bin, flip_bits, wrong_size_entry,
                                                                 compressed_entry]


def zip_bomb(seed: Seed, rng: random.Random) -> tuple[str, bytes]:
    """An attribute declared 1 GiB, its entry 1 MiB of deflated zeros that would inflate to it."""
    attrs = list(re.finditer(r"@(\w+)=\(([\d,]+)\)f32", seed.param))
    if not attrs:
        return seed.param, seed.bin
    m = rng.choice(attrs)
    line_start = seed.param.rfind("\n", 0, m.start()) + 1
    entry = f"{seed.param[line_start:].split()[1]}.{m.group(1)}"
    param = seed.param[:m.start()] + f"@{m.group(1)}=(16384,16384)f32" + seed.param[m.end():]
    source = zipfile.ZipFile(io.BytesIO(seed.bin))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if info.filename != entry:
                target.writestr(info.filename, source.read(info.filename))
        # the bomb, written raw: zipfile would inflate-check what it writes
        stream = _deflated_zeros()
        info = zipfile.ZipInfo(entry)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size, info.compress_size, info.CRC = 1 << 30, len(stream), 0
        info.header_offset = target.fp.tell()
        target.fp.write(info.FileHeader(zip64=False))
        target.fp.write(stream)
        target.filelist.append(info)
        target.NameToInfo[entry] = info
        target.start_dir = target.fp.tell()
    return param, out.getvalue()


_DEFLATED_ZEROS: list[bytes] = []


def _deflated_zeros() -> bytes:
    """1 GiB of zero bytes, deflated (about 1 MiB; made once): one MiB deflated and ended with a full
    flush (the next block starts afresh, so each MiB deflates to the same bytes), repeated 1024 times,
    then the stream's last block. It inflates to the whole GiB, and takes milliseconds, not the 5 s of
    deflating the GiB itself."""
    if not _DEFLATED_ZEROS:
        squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
        one_mib = squeeze.compress(bytes(1 << 20)) + squeeze.flush(zlib.Z_FULL_FLUSH)
        _DEFLATED_ZEROS.append(one_mib * 1024 + squeeze.flush())
    return _DEFLATED_ZEROS[0]


# -- the check ------------------------------------------------------------------------------------------


def mutate(seed: Seed, rng: random.Random) -> tuple[str, str, bytes]:
    """(what was done, param text, bin bytes) of a random mutant of `seed`."""
    roll = rng.random()
    if roll < 0.75:
        mutation = rng.choice(PARAM_MUTATIONS)
        return mutation.__name__, mutation(seed.param, rng), seed.bin
    if roll < 0.99:
        mutation = rng.choice(BIN_MUTATIONS)
        return mutation.__name__, seed.param, mutation(seed.bin, rng)
    param, data = zip_bomb(seed, rng)
    return "zip_bomb", param, data


def inputs(model: compiler.CompiledModel, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for spec in model.inputs:
        if np.issubdtype(np.dtype(spec.dtype), np.floating):
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
        elif spec.dtype == "bool":
            arrays.append(rng.random(spec.shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 4, spec.shape).astype(spec.dtype))
    return arrays


def agree(a: np.ndarray, b: np.ndarray) -> bool:
    """The same up to float32 rounding: NaN where NaN, the rest close relative to the output's scale."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not np.issubdtype(a.dtype, np.floating):
        return bool(np.array_equal(a, b))
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isinf(a), np.isinf(b)) or not np.array_equal(a[np.isinf(a)], b[np.isinf(b)]):
        return False
    scale = max(1.0, float(np.max(np.abs(a[finite]), initial=0.0)))
    return bool(np.allclose(a[finite], b[finite], rtol=1e-3, atol=1e-4 * scale))


def check(param_text: str, bin_bytes: bytes, workdir: Path, numba_cache: Path | None) -> str:
    """What a mutant did: 'rejected: <error type>', 'loaded' (too large to run), 'ran on interpreter and
    executor' or 'ran on all three' (the numba forward too). Raises AssertionError for anything else: an
    error of ours untyped, backends that disagree, a case over its time."""
    start = time.perf_counter()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    param = workdir / "m.pnnx.param"
    param.write_text(param_text)
    (workdir / "m.pnnx.bin").write_bytes(bin_bytes)
    try:
        outcome = _load_and_run(param, numba_cache)
    except CompilerError as exc:
        outcome = f"rejected: {type(exc).__name__}"
    seconds = time.perf_counter() - start
    assert seconds < SECONDS_PER_CASE, f"{outcome} after {seconds:.0f} s"
    return outcome


def _load_and_run(param: Path, numba_cache: Path | None) -> str:
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # a mutant's weights may overflow: fine
        warnings.simplefilter("ignore", RuntimeWarning)
        return _load_and_run_quietly(param, numba_cache)


def _load_and_run_quietly(param: Path, numba_cache: Path | None) -> str:
    """Every mutant that loads runs on the interpreter and on the compiled kernels node by node (the
    executor: no JIT of a forward, milliseconds); with numba_cache, also as one compiled numba forward."""
    reference = compiler.compile(param, backend="interpreter")
    if reference.graph is None or sum(v.type.nbytes for v in reference.graph.values()) > RUN_LIMIT_BYTES:
        return "loaded"
    arrays = inputs(reference, np.random.default_rng(0))
    try:
        with np.errstate(over="raise"):
            expected = _as_list(reference(*arrays))
    except NodeExecutionError as exc:
        if isinstance(exc.__cause__, FloatingPointError):  # a mutant's huge values: float32 results not comparable
            return "ran (overflows float32)"
        raise
    backends = {"executor": lambda: compiler.compile(param, backend="executor", threads=1)}
    if numba_cache is not None:
        backends["numba"] = lambda: compiler.compile(param, cache_dir=numba_cache)
    for name, build in backends.items():
        got = _as_list(build()(*arrays))
        assert len(got) == len(expected) and all(agree(g, e) for g, e in zip(got, expected)), \
            f"the {name} backend and the interpreter disagree"
    return "ran on all three" if numba_cache is not None else "ran on interpreter and executor"


def _as_list(outputs) -> list[np.ndarray]:
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


FAILURES = Path(tempfile.gettempdir()) / "pnnx_jit_fuzz_failures"


def keep_failure(param_text: str, bin_bytes: bytes) -> Path:
    """The mutant's files, kept under FAILURES by digest (to reproduce it and make it a regression test)."""
    digest = hashlib.sha256(param_text.encode() + bin_bytes).hexdigest()[:16]
    directory = FAILURES / digest
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "m.pnnx.param").write_text(param_text)
    (directory / "m.pnnx.bin").write_bytes(bin_bytes)
    return directory / "m.pnnx.param"


def run(cases: int, seed: int, numba_every: int, report_every: int = 0) -> Counter:
    """`cases` mutants, drawn by hypothesis from `seed` (the model, the mutation's random choices); every
    mutant that loads runs on the interpreter and the executor, every numba_every-th one also as a numba
    forward. A failure is shrunk by hypothesis to a
    simplest mutant (fewest, smallest random choices) and raised with its param text."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    seeds = corpus()
    counts: Counter = Counter()
    ran = [0]
    with tempfile.TemporaryDirectory(prefix="pnnx_jit_fuzz_") as scratch:
        work, cache = Path(scratch) / "model", Path(scratch) / "cache"

        @hypothesis_seed(seed)
        @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(source=st.sampled_from(seeds), rng=st.randoms(use_true_random=False))
        def mutant_behaves(source: Seed, rng: random.Random) -> None:
            what, param_text, bin_bytes = mutate(source, rng)
            use_numba = numba_every > 0 and ran[0] % numba_every == 0
            try:
                outcome = check(param_text, bin_bytes, work, cache if use_numba else None)
            except Exception as exc:  # a disagreement, or the failure the fuzzer looks for: an untyped error
                kept = keep_failure(param_text, bin_bytes)
                why = str(exc) if isinstance(exc, AssertionError) else f"raised {type(exc).__name__}: {exc}"
                raise AssertionError(f"{source.name}, {what}: {why}\nthe mutant: {kept}") from exc
            ran[0] += outcome.startswith("ran")
            counts[outcome] += 1
            if report_every and sum(counts.values()) % report_every == 0:
                print(f"{sum(counts.values())} cases: {dict(counts)}", flush=True)

        mutant_behaves()
    return counts


def peak_rss_kib() -> int:
    """This process's peak resident set in KiB: Linux's VmHWM, the high-water mark of its own address
    space. Not getrusage's ru_maxrss, which in a process started by fork and exec begins at the parent's
    size (the kernel carries the forked copy's mark over the exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status: not Linux")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz_models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--numba-every", type=int, default=50, help="compile every Nth running mutant with numba too")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: counts, seconds, peak resident set (KiB)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    counts = run(args.cases, args.seed, args.numba_every, report_every=0 if args.json else 1000)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps({"counts": dict(counts), "seconds": round(seconds, 1), "max_rss_kib": peak_rss_kib()}))
    else:
        print(f"{sum(counts.values())} cases in {seconds:.0f} s, seed {args.seed}: {dict(counts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
