"""Batch inference over columns of numpy arrays: the callable class Ray Data's `map_batches` takes.

    import ray
    from compiler.batch_inference import BatchPredictor

    ds = ray.data.from_items([{"id": i, "in0": image} for i, image in enumerate(images)])
    predictions = ds.map_batches(
        BatchPredictor, fn_constructor_kwargs={"model": "resnet18.pnnx.param", "keep_columns": ["id"]},
        batch_size=32, concurrency=2, num_cpus=1)

Each actor compiles the model once, in its constructor (a machine that compiled it before loads it
from its AOT cache in well under a second; `python -m compiler warmup` compiles the kernel library
ahead). A batch may hold any number of rows: they run in chunks of the model's batch size, the last
chunk padded with zero rows that are cut from the outputs, so a model compiled at batch 8 runs
batches of 1 to 1000 without another compile (a model with a dynamic batch dim runs each batch
whole). Rows are along dim 0 of every input and output. Nothing here imports Ray: a batch is a dict
of column name -> array, as Ray Data's "numpy" batch format gives it.

A compiled model given instead of a path travels to the actors as its files and options, never as
compiled code (CompiledModel.__reduce__), and each actor rebuilds it from its AOT cache.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from compiler.api import compile as compile_model
from compiler.model import CompiledModel
from ir.errors import InputError


class BatchPredictor:
    """model: a .pnnx.param path (compiled here with compile_options) or a compiled model.
    input_columns: the batch's column for each model input (default: the inputs' names, in0, ...);
    output_columns: the name of each output's column (default: out0, ...); keep_columns: columns copied
    from the batch into the result (ids, labels)."""

    def __init__(self, model: str | os.PathLike | CompiledModel, input_columns: Sequence[str] | None = None,
                 output_columns: Sequence[str] | None = None, keep_columns: Sequence[str] = (),
                 **compile_options):
        self.model = model if isinstance(model, CompiledModel) else compile_model(model, **compile_options)
        self.input_columns = list(input_columns or [s.name for s in self.model.inputs])
        self.output_columns = list(output_columns or [s.name for s in self.model.outputs])
        self.keep_columns = list(keep_columns)
        if len(self.input_columns) != len(self.model.inputs) or len(self.output_columns) != len(self.model.outputs):
            raise InputError(f"the model has {len(self.model.inputs)} input(s) and {len(self.model.outputs)} "
                             f"output(s); got columns {self.input_columns} -> {self.output_columns}")
        batches = {s.shape[0] if s.shape else None for s in self.model.inputs}
        # rows per run: the model's batch size, or None when its batch dim is dynamic (any count runs at once)
        self.rows = batches.pop() if len(batches) == 1 else None

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [c for c in self.input_columns + self.keep_columns if c not in batch]
        if missing:
            raise InputError(f"the batch has no column(s) {missing}; it has {sorted(batch)}")
        arrays = [_stacked(batch[c], c) for c in self.input_columns]
        result = dict(zip(self.output_columns, self.predict(arrays)))
        result.update((c, batch[c]) for c in self.keep_columns)
        return result

    def predict(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs for every row of `arrays` (one per input, rows along dim 0)."""
        count = len(arrays[0])
        if any(len(a) != count for a in arrays):
            raise InputError(f"the input columns have different row counts: {[len(a) for a in arrays]}")
        if self.rows is None:
            return _as_list(self.model(*arrays))
        chunks: list[list[np.ndarray]] = []
        for start in range(0, count, self.rows):
            part = [a[start:start + self.rows] for a in arrays]
            short = self.rows - len(part[0])
            if short:  # the last chunk: zero rows up to the model's batch, cut from its outputs below
                part = [np.concatenate([p, np.zeros((short, *p.shape[1:]), p.dtype)]) for p in part]
            outs = _as_list(self.model(*part))
            chunks.append([o[: self.rows - short] for o in outs])
        if not chunks:
            return [np.empty((0, *s.shape[1:]), s.dtype) for s in self.model.outputs]
        return [np.concatenate(parts) for parts in zip(*chunks)]


def _stacked(column: np.ndarray, name: str) -> np.ndarray:
    """A column as one array: Ray gives a column of arrays of different shapes as an object array."""
    column = np.asarray(column)
    if column.dtype == object:
        try:
            return np.stack(list(column))
        except ValueError as exc:
            raise InputError(f"column {name}: its rows do not stack into one array: {exc}") from None
    return column


def _as_list(outputs) -> list[np.ndarray]:
    return list(outputs) if isinstance(outputs, tuple) else [outputs]
