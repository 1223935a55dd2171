"""Where the host has AVX-512F, numba's target features ask LLVM for 512-bit vectors
(codegen/runtime.py, `wide_vector_features`): Intel's AVX-512 models prefer 256 bits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from codegen.runtime import wide_vector_features

AVX2 = "+avx,+avx2,+fma,+sse4.2"
AVX512 = AVX2 + ",+avx512f,+avx512vl,+avx512bw,+avx512dq"


def test_features_ask_for_wide_vectors_only_with_avx512f():
    assert wide_vector_features(AVX512) == AVX512 + ",-prefer-256-bit"
    assert wide_vector_features(AVX2) == AVX2
    assert wide_vector_features("") == ""
    assert wide_vector_features(AVX512 + ",+prefer-256-bit") == AVX512 + ",+prefer-256-bit"  # a choice made


def _vector_registers(env: dict[str, str], tmp_path) -> str:
    """In a fresh process whose host reports AVX-512F (an Intel model: skylake-avx512): whether the
    JIT target's features ask for wide vectors, and whether a vectorised loop uses 512-bit (zmm)
    registers; compiled, never run."""
    script = textwrap.dedent(f"""
        import re
        import numba.core.codegen
        numba.core.codegen.get_host_cpu_features = lambda: {AVX512!r}
        import codegen.runtime  # noqa: F401 - sets the target features
        import numba
        from numba.core.registry import cpu_target

        @numba.njit(fastmath=True)
        def axpy(a, b, c):
            for i in range(a.size):
                c[i] += a[i] * b[i]

        axpy.compile((numba.float32[::1],) * 3)
        asm = axpy.inspect_asm(axpy.signatures[0])
        features = cpu_target.target_context.codegen().magic_tuple()[2]
        print(features.endswith("-prefer-256-bit"), "zmm" in asm)
    """)
    env = {**os.environ, "NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CACHE_DIR": str(tmp_path), **env}
    env.pop("NUMBA_CPU_FEATURES", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_loops_vectorise_to_512_bits_on_avx512(tmp_path):
    assert _vector_registers({}, tmp_path) == ["True", "True"]


def test_prefer_256_bit_keeps_llvm_choice(tmp_path):
    assert _vector_registers({"PNNX_JIT_PREFER_256_BIT": "1"}, tmp_path) == ["False", "False"]
