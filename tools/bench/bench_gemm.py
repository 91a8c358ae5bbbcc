#!/usr/bin/env python3
"""Measured matrix-multiply throughput of this machine: the roofline the engine is held to.

Times ``torch.mm`` in each dtype on two shapes: a big square product (the card's or the CPU's
best case) and the language model's output layer (rows x H times H x V, the product that
dominates the time per scored token). Prints GFLOP/s (2 * M * N * K per product, median of
--repeat timed runs after a warm-up) as a table and JSON.

    PYTHONPATH=. python -m tools.bench.bench_gemm                          # CPU, 1 thread, fp32
    PYTHONPATH=. python -m tools.bench.bench_gemm --device cuda --dtypes fp32,bf16,fp16 --square 8192
    PYTHONPATH=. python -m tools.bench.bench_gemm --int8 --rows 340     # the int8 kernels, engine shapes

``--int8`` (CPU, one thread) times the scoring engine's int8 work per call of --rows rows instead:
an LSTM layer step (K = H: layer 0's recurrent product; K = 2H: an upper layer's) and a softmax
output layer's log Z, each as PyTorch's dynamic int8 product followed by the fused float kernel
(rescore.engine.kernels.native.lstm_cell / logsumexp_rows), as the fused int8 kernel (lstm_int8 /
logsumexp_int8), and in fp32; GOP/s counts the product's 2 M N K.

On CUDA, fp32 runs with TF32 off (``--tf32`` to allow it), so "fp32" is true fp32.
"""

from __future__ import annotations

import argparse
import statistics
import time

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtypes", default="fp32", help="comma list of fp32, bf16, fp16")
    p.add_argument("--threads", type=int, default=1, help="CPU: torch threads")
    p.add_argument("--square", type=int, default=2048, help="M = N = K of the square product")
    p.add_argument("--rows", type=int, default=2048, help="output layer: rows per call")
    p.add_argument("--hidden", type=int, default=256, help="output layer: H")
    p.add_argument("--vocab", type=int, default=10000, help="output layer: V")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tf32", action="store_true", help="CUDA: allow TF32 for fp32")
    p.add_argument("--int8", action="store_true", help="time the int8 kernels (module docstring)")
    p.add_argument("--json", help="write the results here")
    return p.parse_args(argv)


def gflops(torch, device, dtype, m, k, n, repeat) -> float:
    """Median GFLOP/s of (m x k) @ (k x n) in dtype on device."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    inner = max(1, int(2e9 // (2 * m * n * k)))  # ~2 GFLOP per timed run (noise of small ones)
    torch.mm(a, b)
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b)
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return 2 * m * n * k / statistics.median(times) / 1e9


def timed(fn, flops: float, repeat: int) -> float:
    """Median GOP/s of fn() (flops operations per call)."""
    inner = max(1, int(1e9 // flops))
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return flops / statistics.median(times) / 1e9


def int8_kernels(args) -> dict:
    """GOP/s of the engine's int8 work per call: {"<work> <path>": GOP/s} (module docstring)."""
    import torch

    from rescore.engine.kernels import native, quant

    if not native.available() or quant.engine() is None:
        raise SystemExit("--int8 needs the compiled kernels (rescore.engine.kernels._kernels) and a quantised "
                         "CPU engine")
    torch.manual_seed(0)
    M, H, V = args.rows, args.hidden, args.vocab
    out = {}
    print(f"{'work':22} {'M x K x N':>18} {'path':28} {'GOP/s':>8}")

    def report(work, shape, path, g):
        out[f"{work} {path}"] = g
        print(f"{work:22} {shape:>18} {path:28} {g:8.1f}")

    c0, c1, h1 = torch.randn(M, H), torch.empty(M, H), torch.empty(M, H)
    for work, K in (("lstm layer, K = H", H), ("lstm layer, K = 2H", 2 * H)):
        w, b = torch.randn(4 * H, K) * 0.1, torch.randn(4 * H) * 0.1
        x = torch.rand(M, K) * 2 - 1
        dyn, fused = quant.Int8Linear(w, b), native.Int8LSTMLayer(w, b)
        xq = torch.empty(M, K, dtype=torch.uint8)
        wt = w.t().contiguous()
        flops, shape = 2 * M * K * 4 * H, f"{M} x {K} x {4 * H}"

        def dynamic():
            with quant.int8_products():
                native.lstm_cell(dyn(x), c0, c1, h1)

        def one_kernel():
            native.quantize_rows(x, xq)
            native.lstm_int8(xq, fused, c0, c1, h1)

        report(work, shape, "fp32 mm + fused cell", timed(lambda: native.lstm_cell(torch.addmm(b, x, wt), c0, c1, h1),
                                                          flops, args.repeat))
        report(work, shape, "int8 dynamic + fused cell", timed(dynamic, flops, args.repeat))
        report(work, shape, "int8 lstm_int8", timed(one_kernel, flops, args.repeat))
    w, b = torch.randn(V, H) * 0.2, torch.randn(V)
    x = torch.rand(M, H) * 2 - 1
    dyn, fused, wt = quant.Int8Linear(w, b), native.Int8OutputLayer(w, b), w.t().contiguous()
    flops, shape = 2 * M * H * V, f"{M} x {H} x {V}"

    def dynamic_lse():
        with quant.int8_products():
            native.logsumexp_rows(dyn(x))

    def float_lse():
        native.logsumexp_rows(torch.addmm(b, x, wt))

    report("output layer log Z", shape, "fp32 mm + logsumexp", timed(float_lse, flops, args.repeat))
    report("output layer log Z", shape, "int8 dynamic + logsumexp", timed(dynamic_lse, flops, args.repeat))
    report("output layer log Z", shape, "int8 logsumexp_int8", timed(lambda: native.logsumexp_int8(x, fused),
                                                                  flops, args.repeat))
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    if args.int8:
        torch.set_num_threads(1)
        result = {"device": "cpu", "threads": 1, "rows": args.rows, "gops": int8_kernels(args)}
        if args.json:
            from rescore.io.files import write_json

            write_json(args.json, result)
        return

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    shapes = {"square": (args.square, args.square, args.square),
              "output layer": (args.rows, args.hidden, args.vocab)}
    result = {"device": str(device), "threads": args.threads, "tf32": args.tf32,
              "name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                       else "cpu"), "gflops": {}}
    print(f"{'dtype':6} {'shape':14} {'M x K x N':>22} {'GFLOP/s':>10}")
    for name in args.dtypes.split(","):
        dtype = getattr(torch, DTYPES[name])
        for label, (m, k, n) in shapes.items():
            try:
                g = gflops(torch, device, dtype, m, k, n, args.repeat)
            except RuntimeError as err:  # e.g. a dtype the CPU build cannot multiply
                print(f"{name:6} {label:14} {f'{m} x {k} x {n}':>22} {'n/a':>10} ({err})")
                continue
            result["gflops"][f"{name} {label}"] = g
            print(f"{name:6} {label:14} {f'{m} x {k} x {n}':>22} {g:10.1f}")
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, result)


if __name__ == "__main__":
    main()
