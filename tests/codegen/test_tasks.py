"""codegen/kernels/tasks.py: run_tasks, the kernels' parallel loop on numba's threads."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba.np.ufunc.parallel import _iget_thread_id

from codegen.kernels.tasks import FLUSH_DENORMALS, run_tasks


@numba.njit(nogil=True)
def _count(t, hits, threads, spin, scale):
    s = 0.0
    for i in range(spin):  # long enough for every thread to wake and take some
        s += i * scale
    hits[t] += 1 if s >= 0 else 2
    threads[t] = _iget_thread_id()


@numba.njit(nogil=True)
def _count_all(n, spin):
    hits, threads = np.zeros(max(n, 1), np.int64), np.full(max(n, 1), -1, np.int64)
    run_tasks(_count, n, (hits, threads, spin, 0.5))  # a literal float in the tuple
    return hits, threads


# runs of a parallel loop to see both threads take tasks in one: on a loaded machine (the test workers on every
# core) the calling thread can be descheduled while the other takes all 64 tasks; once in CI's 2-core run
ATTEMPTS = 5


def _threads_seen(run) -> set:
    """The thread ids that took tasks in the first run of `run()` (hits, ids) in which two did, else in the last;
    every run must run every task exactly once."""
    for _ in range(ATTEMPTS):
        hits, ids = run()
        assert hits.tolist() == [1] * 64
        seen = set(ids.tolist())
        if len(seen) > 1:
            break
    return seen


@pytest.mark.parametrize("threads", [1, 2])
def test_every_task_runs_once_and_two_threads_share_them(threads):
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs two threads")
    numba.set_num_threads(threads)
    try:
        seen = _threads_seen(lambda: _count_all(64, 200_000))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert len(seen) == threads


@numba.njit(nogil=True)
def _count_all_serial(n, spin, serial):
    hits, threads = np.zeros(max(n, 1), np.int64), np.full(max(n, 1), -1, np.int64)
    run_tasks(_count, n, (hits, threads, spin, 0.5), serial)  # serial a run-time bool
    return hits, threads


@pytest.mark.parametrize("serial", [True, False])
def test_serial_runs_every_task_on_the_calling_thread(serial):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two threads")
    numba.set_num_threads(2)
    try:
        seen = _threads_seen(lambda: _count_all_serial(64, 200_000, serial))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert len(seen) == (1 if serial else 2)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 64, 101])
@pytest.mark.parametrize("threads", [1, 2])
def test_shares_of_any_size_run_every_task_once(n, threads):
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        hits, _ = _count_all(n, 1000)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert hits.tolist() == [1] * n


_MANY_THREADS = """
import numba, numpy as np
from codegen.kernels.tasks import run_tasks

@numba.njit(nogil=True)
def hit(t, hits):
    hits[t] += 1

@numba.njit(nogil=True)
def run(n):
    hits = np.zeros(max(n, 1), np.int64)
    run_tasks(hit, n, (hits,))
    return hits

for threads in (3, 4, 5, 17):  # 17: more than OWNED_MAX, two threads to a share
    numba.set_num_threads(threads)
    for n in (1, 2, 4, 5, 16, 17, 99, 1000):
        assert run(n)[:n].tolist() == [1] * n, (threads, n)
print("ok")
"""


def test_shares_on_more_threads_than_cores_run_every_task_once():
    """Shares of 3, 4 and 5 threads (this machine may have 2 cores) and 17, past OWNED_MAX: threads sharing shares."""
    result = subprocess.run([sys.executable, "-c", _MANY_THREADS], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NUMBA_NUM_THREADS": "17"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@numba.njit(nogil=True)
def _note_first(t, hits, first, spin, scale):
    s = 0.0
    for i in range(spin):
        s += i * scale
    hits[t] += 1 if s >= 0 else 2
    me = _iget_thread_id()
    if first[me] < 0:  # only this thread writes its slot
        first[me] = t


@numba.njit(nogil=True)
def _first_tasks(n, spin):
    hits, first = np.zeros(n, np.int64), np.full(64, -1, np.int64)
    run_tasks(_note_first, n, (hits, first, spin, 0.5))
    return hits, first


def test_each_thread_takes_its_first_task_from_its_own_share():
    """Two threads, 64 tasks: thread 0's share is tasks 0-31, thread 1's 32-63, and each starts on its own.
    Whatever the scheduling, a thread's first task lies in its own share: a thread steals from the next share
    only when its own is used up, and a thread that starts late finds its own share unfinished or every share
    taken (then it takes nothing). Tasks taken from one counter in turns give the second thread to start a
    task of the first half (or, if it starts after half the tasks are done, of the second)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two threads")
    numba.set_num_threads(2)
    both = 0  # runs in which both threads took tasks (on a loaded machine one thread may take them all)
    try:
        for _ in range(60):
            hits, first = _first_tasks(64, 200_000)
            assert hits.tolist() == [1] * 64
            for thread, task in enumerate(first.tolist()):
                if task >= 0:
                    assert task // 32 == thread % 2, (thread, task)
            both += bool((first[:2] >= 0).all())
            if both == 5:
                break
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert both > 0


def test_no_tasks_runs_nothing():
    hits, ids = _count_all(0, 10)
    assert hits.tolist() == [0] and ids.tolist() == [-1]


@numba.njit(nogil=True)
def _fail_on(t, bad, out):
    if t == bad:
        raise ValueError("bad task")
    out[t] = t


@numba.njit(nogil=True)
def _run_failing(n, bad, out):
    run_tasks(_fail_on, n, (bad, out))


def test_a_failing_task_raises_and_the_next_run_works():
    out = np.zeros(100, np.int64)
    with pytest.raises(RuntimeError, match="a parallel task of a kernel raised"):
        _run_failing(100, 37, out)
    out[:] = 0
    _run_failing(100, -1, out)
    assert out.tolist() == list(range(100))


@numba.njit(nogil=True)
def _scale_row(r, x, out, factor, shape, bias):
    for j in range(shape[1]):
        out[r, j] = x[r, j] * factor + (0.0 if bias is None else bias[j])


@numba.njit(nogil=True)
def _scale_rows(x, out, factor, bias):
    run_tasks(_scale_row, x.shape[0], (x, out, factor, x.shape, bias))


def test_arguments_of_every_kind_reach_the_body_and_arrays_keep_their_reference_count():
    x = np.arange(12.0).reshape(4, 3)
    out = np.empty_like(x)
    before = sys.getrefcount(x), sys.getrefcount(out)
    _scale_rows(x, out, 2.0, None)
    np.testing.assert_array_equal(out, x * 2)
    bias = np.array([1.0, 2.0, 3.0])
    _scale_rows(x, out, np.float32(0.5), bias)
    np.testing.assert_array_equal(out, x * 0.5 + bias)
    assert (sys.getrefcount(x), sys.getrefcount(out)) == before


@numba.njit(nogil=True)
def _products(t, a, b, out):
    out[t] = a[t] * b[t]


@numba.njit(nogil=True)
def _all_products(a, b, serial):
    out = np.full(a.size, -1.0, np.float32)
    run_tasks(_products, a.size, (a, b, out), serial)
    return out


@pytest.mark.skipif(not FLUSH_DENORMALS, reason="x86-64's MXCSR")
@pytest.mark.parametrize("serial", [True, False])
def test_tasks_flush_denormals_and_the_calling_thread_keeps_its_own_mode(serial):
    """A denormal product comes out 0 (FTZ), a denormal input counts as 0 (DAZ), a normal one is kept; after the
    run the calling thread computes denormals again (its MXCSR restored)."""
    if not serial and numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two threads")
    tiny = np.float32(1e-40)  # a denormal float32
    a = np.array([1e-20, tiny, 1e-19, 3.0] * 16, np.float32)
    b = np.array([1e-20, 1.0, 1e-18, 0.5] * 16, np.float32)
    assert (a[0] * b[0]) != 0 and a[1] * b[1] == tiny  # numpy on this thread: denormals as they are
    numba.set_num_threads(1 if serial else 2)
    try:
        out = _all_products(a, b, serial)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    expected = a * b  # the same products, the denormal ones 0
    expected[0::4] = expected[1::4] = 0
    np.testing.assert_array_equal(out, expected)
    assert expected[2] > 0 and expected[3] == 1.5
    assert (a[0] * b[0]) != 0 and a[1] * b[1] == tiny
