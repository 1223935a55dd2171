"""The layers import downwards only: ir <- codegen <- compiler.

Each import runs in a fresh interpreter and reports the modules of ours it loaded.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("ir", "codegen", "compiler")


def loaded_by(code: str, packages: tuple[str, ...] = OURS) -> list[str]:
    """The modules of `packages` (ours by default) loaded after running `code` in a fresh interpreter (at the
    repo root)."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def in_package(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


@pytest.mark.parametrize("code", [
    "import ir",
    "import ir.op_registry\nir.op_registry.all_ops()",  # imports every op family
])
def test_ir_loads_neither_codegen_nor_compiler(code):
    modules = loaded_by(code)
    assert "ir" in modules
    assert in_package(modules, "compiler") == []
    assert in_package(modules, "codegen") == []


@pytest.mark.parametrize("code", [
    "import codegen",
    "import codegen.emitter",
    "import codegen.emit\nassert codegen.emit.emit_rule('conv2d') is not None",  # loads every emit rule
    "import codegen.linker",
    "import codegen.kernels",
])
def test_codegen_loads_no_compiler_module(code):
    modules = loaded_by(code)
    assert "codegen" in modules
    # the front end of the compiler above all: codegen must not drag in the CLI or the public API
    assert in_package(modules, "compiler.cli") == [] and in_package(modules, "compiler.api") == []
    assert in_package(modules, "compiler") == []


def test_ir_errors_imports_nothing_of_ours():
    """Every layer raises these errors, so the module that defines them sits below all of them."""
    tree = ast.parse((ROOT / "ir" / "errors.py").read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
    ours = [name for name in imported if name.startswith(".") or name.split(".")[0] in OURS]
    assert ours == [], f"ir/errors.py imports {ours}"


def test_importing_the_package_loads_neither_numba_nor_scipy_special():
    """`import compiler` (and every op family's reference) stays light: numba comes with the numba backend,
    scipy.special with the first reference that needs it (erf, expit, gammaln). It cost ~0.3 s of every
    import of the package, before any model was asked for."""
    modules = loaded_by("import compiler, ir.op_registry\nir.op_registry.all_ops()", ("numba", "scipy"))
    assert [m for m in modules if m == "numba" or m.startswith(("numba.", "scipy.special"))] == []
