"""A program that runs out of GPU memory on purpose, written as a user's would be (no wanscope
import): it loads 1 GiB of "weights" in four tensors, then each step keeps an activation twice
the size of the last (1 GiB, 2 GiB, 4 GiB, ...) until ``torch.cuda.OutOfMemoryError`` ends it,
uncaught. Before each request it prints ``requesting N bytes``, so the last such line is the
allocation that failed. ``memory_snapshot_capture.py`` runs it under

    wanscope profile --memory-history --out DIR -- python3 benchmarks/oom_program.py

and checks that the snapshot shows that allocation, its size and its stack (``make_activation``
called by ``train_step`` called by ``main``). Needs a CUDA GPU.
"""

import torch

GIB = 1 << 30


def load_weights() -> list:
    weights = []
    for _ in range(4):  # a loop, not a comprehension: its frame is this function's on every Python
        weights.append(torch.empty(GIB // 4, dtype=torch.uint8, device="cuda"))
    return weights


def make_activation(n: int) -> torch.Tensor:
    print(f"requesting {n} bytes", flush=True)
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def train_step(held: list, i: int) -> None:
    held.append(make_activation(GIB << i))


def main() -> None:
    weights = load_weights()
    held = []
    for i in range(32):  # 1 GiB << 31 still fits an int64 count of bytes
        train_step(held, i)
    print("never reached", len(weights), len(held))


if __name__ == "__main__":
    main()
