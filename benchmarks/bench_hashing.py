"""How much the vectorised key hashes save over a Python loop, on a bulk-append-sized key column.

Run: ``.venv/bin/python benchmarks/bench_hashing.py`` with the project installed (or ``PYTHONPATH=.``).
Prints figures only; nothing is asserted, because timings depend on the machine.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial

import mmh3
import pyarrow as pa

from broker_core.hashing import java_string_hash, java_string_hash_array, murmur3_32_hash_array

NUM_ROWS = 1_000_000
NUM_DISTINCT = 100_000


def _best_of(repeats: int, action: Callable[[], object]) -> float:
    """Best wall time in seconds over ``repeats`` runs (the least disturbed by other load)."""
    best_s = float("inf")
    for _ in range(repeats):
        start_s = time.perf_counter()
        action()
        best_s = min(best_s, time.perf_counter() - start_s)
    return best_s


def main() -> None:
    rng = random.Random(42)
    distinct = [f"user-{rng.getrandbits(48):x}-{i}" for i in range(NUM_DISTINCT)]
    repeated = [distinct[rng.randrange(NUM_DISTINCT)] for _ in range(NUM_ROWS)]
    all_distinct = [f"order-{i}-{rng.getrandbits(32):x}" for i in range(NUM_ROWS)]
    print(f"{NUM_ROWS:,} keys; mean length {sum(map(len, repeated)) / NUM_ROWS:.1f} characters")

    for label, keys in ((f"{NUM_DISTINCT:,} distinct", repeated), (f"{NUM_ROWS:,} distinct", all_distinct)):
        column = pa.array(keys, type=pa.string())

        def loop_murmur(column: pa.Array = column) -> list[int]:
            return [mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF for key in column.to_pylist()]

        def loop_java(column: pa.Array = column) -> list[int]:
            return [java_string_hash(key) for key in column.to_pylist()]

        vector_murmur_s = _best_of(3, partial(murmur3_32_hash_array, column))
        loop_murmur_s = _best_of(1, loop_murmur)
        vector_java_s = _best_of(3, partial(java_string_hash_array, column))
        loop_java_s = _best_of(1, loop_java)
        print(f"[{label}]")
        print(
            f"  murmur3: vectorised {vector_murmur_s * 1e3:8.1f} ms | Python loop over mmh3 "
            f"{loop_murmur_s * 1e3:8.1f} ms | speed-up {loop_murmur_s / vector_murmur_s:5.1f}x"
        )
        print(
            f"  java:    vectorised {vector_java_s * 1e3:8.1f} ms | Python loop (scalar)   "
            f"{loop_java_s * 1e3:8.1f} ms | speed-up {loop_java_s / vector_java_s:5.1f}x"
        )


if __name__ == "__main__":
    main()
