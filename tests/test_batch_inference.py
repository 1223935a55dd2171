"""Beyond one process: a compiled model pickles as its files and options and rebuilds from the AOT
cache; BatchPredictor runs batches of any size on Ray Data (a local cluster) and gives every row the
single-process result."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from bench.pnnx_export import export_zoo
from compiler import InputError
from compiler.batch_inference import BatchPredictor

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "compiler" / "data" / "tiny_cnn.pnnx.param"


def _images(count: int, shape=(3, 32, 32), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, *shape)).astype(np.float32)


@pytest.fixture(scope="module")
def batch8():
    """tiny_cnn exported at batch 8, compiled, and its result for 20 images, 8 at a time."""
    param = export_zoo("tiny_cnn", batch=8)
    model = compiler.compile(param)
    x = _images(20)
    padded = np.concatenate([x, np.zeros((4, 3, 32, 32), np.float32)])
    expected = np.concatenate([model(padded[i:i + 8]) for i in range(0, 24, 8)])[:20]
    return param, model, x, expected


def test_batches_of_any_size_run_in_chunks_of_the_compiled_batch(batch8):
    param, model, x, expected = batch8
    predictor = BatchPredictor(model, keep_columns=["id"])
    assert predictor.rows == 8
    for count in (1, 7, 8, 13, 20):
        result = predictor({"in0": x[:count], "id": np.arange(count)})
        np.testing.assert_array_equal(result["out0"], expected[:count])
        np.testing.assert_array_equal(result["id"], np.arange(count))
    assert len(model.signatures) == 0  # no other batch size was compiled
    empty = predictor({"in0": x[:0], "id": np.arange(0)})
    assert empty["out0"].shape == (0, 10)


def test_a_column_of_separate_arrays_is_stacked(batch8):
    _, model, x, expected = batch8
    column = np.empty(5, dtype=object)
    for i in range(5):
        column[i] = x[i]
    np.testing.assert_array_equal(BatchPredictor(model)({"in0": column})["out0"], expected[:5])


def test_bad_columns_are_input_errors(batch8):
    _, model, x, _ = batch8
    with pytest.raises(InputError, match=r"no column\(s\) \['image'\]"):
        BatchPredictor(model, input_columns=["image"])({"in0": x})
    with pytest.raises(InputError, match=r"1 input\(s\) and 1 output\(s\)"):
        BatchPredictor(model, input_columns=["a", "b"])


def test_a_pickled_model_carries_its_files_not_compiled_code(batch8, tmp_path):
    """pickle and cloudpickle give the model files' bytes and the options (no numba code objects); a
    fresh process rebuilds it from its AOT cache and computes the same outputs."""
    import cloudpickle

    param, model, x, expected = batch8
    files = param.stat().st_size + param.with_suffix(".bin").stat().st_size
    blob = cloudpickle.dumps(model)
    assert files <= len(blob) < files + 4096
    assert _classes(blob) <= {("compiler.api", "rebuild"), ("compiler.api", "ModelFiles")}  # no numba objects
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    np.save(tmp_path / "x.npy", x[:8])
    script = ("import pickle, sys, numpy as np; m = pickle.load(open(sys.argv[1], 'rb')); "
              "print(type(m).__name__, m.cache_info.hit); np.save(sys.argv[2], m(np.load(sys.argv[3])))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "model.pkl"), str(tmp_path / "y.npy"),
                           str(tmp_path / "x.npy")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["NumbaModel", "True"]  # loaded from the AOT cache this process filled
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected[:8])


def _classes(blob: bytes) -> set[tuple[str, str]]:
    """The (module, name) of every class or function a pickle refers to."""
    found = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    Recorder(io.BytesIO(blob)).load()
    return found


def test_a_specialization_and_an_interpreter_pickle_too(batch8):
    _, model, x, expected = batch8
    specialized = pickle.loads(pickle.dumps(model.specialize({"in0": (2, 3, 32, 32)})))
    assert specialized.inputs[0].shape == (2, 3, 32, 32)
    np.testing.assert_allclose(specialized(x[:2]), expected[:2], rtol=1e-5, atol=1e-6)
    interpreter = compiler.compile(SHIPPED, backend="interpreter")
    again = pickle.loads(pickle.dumps(interpreter))
    assert again.backend == "interpreter"
    np.testing.assert_array_equal(again(x[:1]), interpreter(x[:1]))


def test_ray_data_map_batches_on_a_local_cluster():
    """A few hundred images of the zoo's CNN (compiled at batch 8) through map_batches on two actors,
    in batches Ray chooses: every row is the single-process result, bit for bit."""
    ray = pytest.importorskip("ray")
    param = export_zoo("tiny_cnn", batch=8)
    x = _images(256, seed=1)
    expected = BatchPredictor(compiler.compile(param)).predict([x])[0]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ds = ray.data.from_items([{"id": i, "image": x[i]} for i in range(len(x))])
        out = ds.map_batches(BatchPredictor, fn_constructor_kwargs={
            "model": str(param), "input_columns": ["image"], "output_columns": ["logits"], "keep_columns": ["id"],
            "threads": 1}, batch_size=20, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1,
            batch_format="numpy")
        rows = out.take_all()
    finally:
        ray.shutdown()
    assert len(rows) == len(x)
    ids = np.array([r["id"] for r in rows])
    assert sorted(ids) == list(range(len(x)))
    got = np.stack([r["logits"] for r in rows])[np.argsort(ids)]
    np.testing.assert_array_equal(got, expected)
