#!/usr/bin/env python3
"""The Python call overhead of a dense decode step: amc.DenseDecoder.decode called from Python
against the same operator call looped in C++ on the same inputs (DenseDecoder.time_decode).

One GQA group of Qwen2-0.5B's shape by default: 7 query heads (f32), one KV head of 2048
positions, head_dim 64, keys and values bf16 PyTorch tensors (read in place through DLPack).
The Python side pays what a caller pays per step: the DLPack export of q, k and v, the checks,
the output array and the result object; the C++ side only the operator call. Rounds alternate
C++ and Python so that drifting load affects both; the medians over the rounds are reported.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python_overhead.py [--json]

(or with the package installed: python3 bench/python_overhead.py). Prints the time per call of
each, the overhead in microseconds and the ratio Python / C++.
"""

import argparse
import json
import platform
import statistics
import time

import torch

import amc


def machine():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=2048)
    parser.add_argument("--query-heads", type=int, default=7)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    parser.add_argument("--iterations", type=int, default=200, help="calls per round")
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    q = torch.randn(args.query_heads, args.head_dim)
    k = torch.randn(1, args.positions, args.head_dim).to(dtype)
    v = torch.randn(1, args.positions, args.head_dim).to(dtype)
    decoder = amc.DenseDecoder()
    decode = decoder.decode

    for _ in range(args.iterations // 4):  # warm caches, the allocator and the CPU clock
        decode(q, k, v)
    cpp, python = [], []
    for _ in range(args.rounds):
        cpp.append(decoder.time_decode(q, k, v, args.iterations))
        start = time.perf_counter()
        for _ in range(args.iterations):
            decode(q, k, v)
        python.append((time.perf_counter() - start) / args.iterations)
    cpp_s, python_s = statistics.median(cpp), statistics.median(python)
    result = {
        "machine": machine(),
        "kernels": amc.kernels(),
        "torch": torch.__version__,
        "positions": args.positions,
        "query_heads": args.query_heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "iterations": args.iterations,
        "rounds": args.rounds,
        "cpp_us": cpp_s * 1e6,
        "python_us": python_s * 1e6,
        "overhead_us": (python_s - cpp_s) * 1e6,
        "ratio": python_s / cpp_s,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['machine']}, kernels {result['kernels']}, torch {result['torch']}")
    print(f"dense decode, {args.query_heads} query heads, 1 KV head, {args.positions} positions, "
          f"head_dim {args.head_dim}, {args.dtype} keys and values; medians of {args.rounds} "
          f"rounds of {args.iterations} calls")
    print(f"C++ call     {result['cpp_us']:8.2f} us")
    print(f"Python call  {result['python_us']:8.2f} us")
    print(f"overhead     {result['overhead_us']:8.2f} us, ratio {result['ratio']:.3f}")


if __name__ == "__main__":
    main()
