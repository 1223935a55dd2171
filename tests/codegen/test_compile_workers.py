"""codegen/compile_workers.py: a model's missing kernels compile in the main process and in workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codegen.compile_workers import ENV, MAX_PROCESSES, Job, _usable_cores, compile_jobs, process_count

ROOT = Path(__file__).resolve().parents[2]

# A forward calling two signatures of a library kernel, linked from empty caches with two processes:
# one signature compiles here, the other in a worker, and is then loaded here from numba's cache.
# Then a job a worker cannot compile: compile_jobs returns, and compiling it here raises the error.
FIRST_USE = '''
import importlib.util, json, logging, sys, types
import numpy as np
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("codegen").addHandler(Keep())
logging.getLogger("codegen").setLevel(logging.INFO)

from numba.core import types as nt
from codegen.kernels import reduce
from codegen.compile_workers import Job, compile_jobs
from codegen.linker import bind, link

SOURCE = """import numba


@numba.njit(cache=True)
def forward(x32, o32, x64, o64):
    reduce_sum(x32, o32, 2, 3, 1, False, 0.0, False)
    reduce_sum(x64, o64, 2, 3, 1, True, 0.0, False)
"""
module = types.ModuleType("first_use_kernels")
module.reduce_sum = reduce.reduce_sum
x32, x64 = np.arange(6, dtype=np.float32), np.arange(6.0) ** 2
o32, o64 = np.zeros(2, np.float32), np.zeros(2)
linked = link(SOURCE, module, {"forward": (x32, o32, x64, o64)})
path = sys.argv[1] + "/forward.py"
open(path, "w").write(linked.source)
spec = importlib.util.spec_from_file_location("first_use_forward", path)
forward = importlib.util.module_from_spec(spec)
spec.loader.exec_module(forward)
forward.forward(x32, o32, x64, o64, bind(module, linked.table))
hits = {str(sig[0]): n for sig, n in reduce.reduce_sum._cache_hits.items()}

bad = Job("codegen.kernels.reduce", "reduce_sum", (nt.unicode_type,) * 8)
good = Job("codegen.kernels.reduce", "reduce_sum", (nt.Array(nt.int64, 1, "C"),) * 2 + (nt.int64,) * 3
           + (nt.boolean, nt.float64, nt.boolean))
here = []
compile_jobs([good, bad], lambda job: here.append(job.argtypes[0]) or reduce.reduce_sum.compile(job.argtypes))
try:
    reduce.reduce_sum.compile(bad.argtypes)
    error = None
except Exception as exc:
    error = type(exc).__name__
print(json.dumps({"o32": o32.tolist(), "o64": o64.tolist(), "records": records, "hits": hits,
                  "here": [str(t) for t in here], "error": error}))
'''


@pytest.fixture
def first_use(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(ROOT), **{ENV: "2"})
    done = subprocess.run([sys.executable, "-c", FIRST_USE, str(tmp_path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_forward_links_kernels_compiled_by_a_worker_and_runs(first_use):
    assert first_use["o32"] == [0 + 1 + 2, 3 + 4 + 5]
    assert first_use["o64"] == [(0 + 1 + 4) / 3, (9 + 16 + 25) / 3]
    records = first_use["records"]
    assert records[0] == "compiling 2 kernels for this machine, once (numba caches them) in 2 processes: " \
                         "reduce.reduce_sum x2"
    assert sum(r.startswith("compiled reduce.reduce_sum in ") for r in records) == 3  # two here, one by a worker
    assert sum(r.endswith("s (worker)") for r in records) == 1
    # the worker's signature was loaded from numba's cache here, not compiled again
    assert sum(first_use["hits"].values()) == 1


def test_a_job_a_worker_fails_is_left_to_the_caller_which_reports_the_error(first_use):
    assert first_use["here"] == ["array(int64, 1d, C)"]  # the good job here, the bad one in the worker
    assert first_use["error"] == "TypingError"


def test_the_process_count_comes_from_the_environment_within_the_job_count(monkeypatch, caplog):
    monkeypatch.setenv(ENV, "3")
    assert [process_count(jobs) for jobs in (1, 2, 5)] == [1, 2, 3]
    monkeypatch.delenv(ENV)
    default = min(_usable_cores(), MAX_PROCESSES)
    assert process_count(100) == default
    for wrong in ("0", "-2", "two"):  # the default, and a warning that says why
        monkeypatch.setenv(ENV, wrong)
        caplog.clear()
        assert process_count(100) == default
        assert [r.levelname for r in caplog.records] == ["WARNING"] and repr(wrong) in caplog.records[0].getMessage()


def test_one_process_compiles_every_job_here_in_order(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    jobs = [Job("codegen.kernels.pool", "pool2d", (i,)) for i in range(3)]
    done = []
    compile_jobs(jobs, done.append)
    assert done == jobs


def test_an_error_here_stops_the_workers_and_propagates(monkeypatch):
    monkeypatch.setenv(ENV, "2")
    started = []
    real_popen = subprocess.Popen

    def popen(*args, **kws):
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)

    def fail(job):
        for _ in range(500):  # until the feeder thread has started its worker
            if started:
                break
            time.sleep(0.01)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compile_jobs([Job("codegen.kernels.pool", "pool2d", (i,)) for i in range(3)], fail)
    assert started and all(p.poll() is not None for p in started)  # killed, not left running


def test_compile_cost_counts_the_jitted_functions_a_kernel_reaches():
    """The order jobs start in (longest first): a kernel's own source and its jitted callees', each once."""
    import inspect

    from codegen.compile_workers import compile_cost
    from codegen.kernels import blocked, control, conv_packed

    own = len(inspect.getsource(control.check_stop.py_func))
    assert compile_cost(control.check_stop) == own  # calls no jitted function
    conv = compile_cost(blocked.conv1x1_blocked_prologue)
    assert conv > 4 * len(inspect.getsource(blocked.conv1x1_blocked_prologue.py_func))  # its callees count
    assert compile_cost(conv_packed.conv2d_packed) > conv > 10 * own


def test_jobs_go_longest_first_but_apart_from_a_module_another_process_compiles():
    """_Shared.take: a worker takes library kernels only, in the order given (the longest first), but one of a
    module no other process is compiling before one of such a module (they share callees, which the first to
    compile them caches for the other); the main process takes the kernels only it can compile first."""
    from codegen.compile_workers import LIBRARY, _Shared

    def job(module, name):
        return Job(module if module.startswith("pnnx") else LIBRARY + module, name, ())

    jobs = [job("blocked", "a"), job("blocked", "b"), job("conv_packed", "c"), job("pnnx_jit_ew_1", "e"),
            job("blocked", "d")]
    shared = _Shared(list(jobs))
    first = shared.take(for_worker=True)
    assert first.qualname == "a"
    here = shared.take(for_worker=False)
    assert here.qualname == "e"  # the generated kernel: no worker can import it
    assert shared.take(for_worker=False, done=here).qualname == "c"  # blocked is being compiled by the worker
    assert shared.take(for_worker=True, done=first).qualname == "b"  # blocked's "a" is done: in order again
    assert shared.take(for_worker=True).qualname == "d"
    assert shared.take(for_worker=True) is None and shared.take(for_worker=False) is None
