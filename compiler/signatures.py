"""Run signatures, and the models compiled for each: as DirectSession keeps one executor per signature.

A signature is what a run feeds (value names, shapes, dtypes) and what it fetches (value names, or
None for the model's outputs). `compile()` builds the model for the declared signature; a run with
any other (another batch size or image size, an intermediate value fetched or fed) is pruned,
specialised and compiled once by `SignatureCache.get`, then kept in memory (the numba backend also
keeps it in the AOT cache, whose key covers the feeds, fetches and input shapes).

    m(x_batch_3)                                  # the batch-3 specialization, compiled on first use
    m.run(["relu_7", "out0"], {"in0": x})         # pruned to what relu_7 and out0 need
    m.run(["out0"], {"relu_7": r})                # starts at relu_7: in0 is not needed
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Feed:
    name: str
    shape: tuple[int, ...]  # dtypes are not part of a signature: runs convert floats to the model's dtype


@dataclass(frozen=True)
class Signature:
    """What one run feeds and fetches. feeds: graph inputs first, in their order, then intermediates
    by name; fetches: in the order asked, without repeats (None: the model's outputs)."""

    feeds: tuple[Feed, ...]
    fetches: tuple[str, ...] | None = None

    @staticmethod
    def of(feeds: dict[str, np.ndarray], input_names: Sequence[str], fetches: Sequence[str] | None) -> Signature:
        rank = {name: i for i, name in enumerate(input_names)}
        order = sorted(feeds, key=lambda name: (rank.get(name, len(rank)), name))
        return Signature(tuple(Feed(n, tuple(np.shape(feeds[n]))) for n in order),
                         None if fetches is None else tuple(dict.fromkeys(fetches)))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.feeds]

    def describe(self) -> str:
        """"in0 (3, 3, 224, 224); fetching relu_7": what a message about this signature names."""
        fed = ", ".join(f"{f.name} {f.shape}" for f in self.feeds) or "no feeds"
        return fed + (f"; fetching {', '.join(self.fetches)}" if self.fetches else "")


class SignatureCache:
    """The models of one compiled model's other signatures, each built once by build(signature).

    Thread-safe: runs that need the same new signature at once wait for one build; a build that fails
    is not kept (the next run with that signature tries again and raises again)."""

    def __init__(self, build: Callable[[Signature], object]):
        self._build = build
        self._lock = threading.Lock()
        self._models: dict[Signature, Future] = {}

    def get(self, signature: Signature):
        with self._lock:
            future = self._models.get(signature)
            owner = future is None
            if owner:
                future = self._models[signature] = Future()
        if owner:
            try:
                future.set_result(self._build(signature))
            except BaseException as exc:
                with self._lock:
                    del self._models[signature]
                future.set_exception(exc)
        return future.result()

    def __len__(self) -> int:
        return len(self._models)
