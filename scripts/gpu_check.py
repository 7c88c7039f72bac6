"""Everything a lent GPU machine should measure, in one call (run by ``scripts/gpu_check.sh``).

Run:  python scripts/gpu_check.py --out OUTDIR [--device cuda] [--quick] [--skip-tests]

Writes ``OUTDIR/gpu_check.json`` (and ``OUTDIR/bench_cost.txt``, ``OUTDIR/pytest_gpu.txt``):

- ``environment``: device name, torch and CUDA versions, Python, which peer libraries exist.
- ``tests``: ``pytest -m gpu`` (return code, the summary line, the output's tail); skipped
  with a reason when pytest is not installed.
- ``cost``: ``benchmarks/bench_cost.py`` on the device (its JSON: the ratio table against
  AdamW, PASS/FAIL, IsoAdam's breakdown); on CUDA Muon runs bfloat16 Newton-Schulz,
  statistics stay float32, and IsoAdam is also timed with matmul-only roots
  (``root_method="newton"``).
- ``ch13_dtype_timings``: Chapter 13's per-dtype timings. Schema (every time in
  milliseconds, the best of ``repeats`` runs after a warm-up; ``tflops`` = ``2·m·k·n / time``)::

    {"device": str, "torch": str, "repeats": int,
     "matmul": [{"shape": "square"|"forward", "m": int, "k": int, "n": int,
                 "dtype": "float32"|"tf32"|"bfloat16", "ms": float, "tflops": float}, ...],
     "throughput_tflops": {"float32": float, "tf32": float, "bfloat16": float},
     "eigh_root": [{"n": int, "dtype": "float32", "ms": float}, ...],
     "newton_root": [{"n": int, "dtype": "float32", "ms": float, "iterations": int}, ...],
     "newton_schulz": [{"n": int, "dtype": "float32"|"bfloat16", "steps": 5, "ms": float}, ...],
     "gram": [{"rows": int, "n": int, "dtype": "float32", "ms": float}, ...]}

  ``square``: an ``n×n`` product (roots, their application, Newton-Schulz); ``forward``: a
  layer's ``(b × n) @ (n × n)`` with ``b`` tokens. ``throughput_tflops`` is the best rate
  over the sizes, comparable to :data:`isolab.book.scaling.H100_TFLOPS`. ``tf32`` is a float32
  product with ``torch.backends.cuda.matmul.allow_tf32 = True``.

Every part runs under its own ``try``: an error is recorded under ``errors`` and the others
still run. ``--device cpu --quick`` produces the same schema on a CPU in a few seconds (the
test of this script). The whole call is meant to finish in under 5 minutes on a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_VERSION = 1

#: Sizes of Chapter 13's cost model: square widths, and tokens per step for a layer's forward.
WIDTHS = (256, 512, 1024, 2048, 4096, 8192)
FORWARD_TOKENS = 8192
EIGH_WIDTHS = (256, 512, 1024, 2048, 4096)
QUICK_WIDTHS = (16, 32)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_time(fn, device, repeats):
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def environment(device):
    peers = {name: importlib.util.find_spec(name) is not None
             for name in ("pytest", "numpy", "pytorch_optimizer", "heavyball", "matplotlib")}
    env = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "peers": peers}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["memory_gib"] = round(props.total_memory / 2**30, 1)
        env["capability"] = f"{props.major}.{props.minor}"
    return env


def gpu_test_files() -> list[str]:
    """The test files with ``gpu``-marked tests (relative paths). Only those are collected: a
    module that needs a package this machine lacks (numpy, matplotlib, hypothesis...) must not
    stop the others."""
    return sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("**/test_*.py")
                  if "@pytest.mark.gpu" in f.read_text())


def run_tests(out: Path, timeout: int):
    if importlib.util.find_spec("pytest") is None:
        return {"skipped": "pytest is not installed on this machine"}
    files = gpu_test_files()
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "--continue-on-collection-errors", *files]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or "") if isinstance(e.stdout, str) else ""
        (out / "pytest_gpu.txt").write_text(text)
        return {"command": " ".join(cmd[1:]), "returncode": None, "timed_out": timeout, "tail": text[-3000:]}
    text = proc.stdout + proc.stderr
    (out / "pytest_gpu.txt").write_text(text)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    summary = next((ln for ln in reversed(lines) if " in " in ln and ("passed" in ln or "failed" in ln
                                                                       or "skipped" in ln or "error" in ln
                                                                       or "deselected" in ln)), "")
    return {"command": " ".join(cmd[1:]), "returncode": proc.returncode, "summary": summary.strip("= "),
            "tail": text[-3000:]}


def run_cost(out: Path, device, quick):
    spec = importlib.util.spec_from_file_location("bench_cost", ROOT / "benchmarks" / "bench_cost.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--device", str(device), "--extra"]
    if quick:
        argv += ["--quick", "--rounds", "2", "--block", "1", "--warmup", "1"]
    elif device.type == "cuda":
        argv += ["--rounds", "6", "--block", "5", "--warmup", "3"]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        res = bench.main(argv)
    (out / "bench_cost.txt").write_text(buf.getvalue())
    print(buf.getvalue())
    return res


def ch13_dtype_timings(device, quick, repeats):
    from isolab import linalg

    widths = QUICK_WIDTHS if quick else WIDTHS
    eigh_widths = QUICK_WIDTHS if quick else EIGH_WIDTHS
    tokens = 64 if quick else FORWARD_TOKENS
    res = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "repeats": repeats, "matmul": [], "eigh_root": [], "newton_root": [],
           "newton_schulz": [], "gram": []}
    dtypes = [("float32", torch.float32, False), ("tf32", torch.float32, True), ("bfloat16", torch.bfloat16, False)]
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    gen = torch.Generator().manual_seed(0)
    try:
        for n in widths:
            for shape, (m, k) in (("square", (n, n)), ("forward", (tokens, n))):
                a32 = torch.randn(m, k, generator=gen).to(device)
                b32 = torch.randn(k, n, generator=gen).to(device)
                for label, dt, tf32 in dtypes:
                    if label == "tf32" and device.type != "cuda":
                        continue  # TF32 is a CUDA mode
                    torch.backends.cuda.matmul.allow_tf32 = tf32
                    a, b = a32.to(dt), b32.to(dt)
                    ms = best_time(lambda: a @ b, device, repeats)
                    res["matmul"].append({"shape": shape, "m": m, "k": k, "n": n, "dtype": label, "ms": ms,
                                          "tflops": 2 * m * k * n / (ms * 1e-3) / 1e12})
                del a32, b32
        torch.backends.cuda.matmul.allow_tf32 = False
        for n in eigh_widths:
            X = torch.randn(4 * n, n, generator=gen).to(device)
            C = X.T @ X / X.shape[0]
            res["eigh_root"].append({"n": n, "dtype": "float32",
                                     "ms": best_time(lambda: linalg.symmetric_inverse_root(C, p=2, damping=1e-3),
                                                     device, max(1, repeats // 2))})
            info = linalg.inverse_sqrt_newton_info(C, damping=1e-3)
            res["newton_root"].append({"n": n, "dtype": "float32", "iterations": int(info.iterations),
                                       "ms": best_time(lambda: linalg.inverse_sqrt_newton(C, damping=1e-3),
                                                       device, max(1, repeats // 2))})
            M = torch.randn(n, n, generator=gen).to(device)
            for label, dt in (("float32", None), ("bfloat16", torch.bfloat16)):
                res["newton_schulz"].append({"n": n, "dtype": label, "steps": 5, "ms": best_time(
                    lambda: linalg.msign_newton_schulz(M, compute_dtype=dt), device, repeats)})
            res["gram"].append({"rows": tokens, "n": n, "dtype": "float32",
                                "ms": best_time(lambda: linalg.gram(X[: min(len(X), tokens)]), device, repeats)})
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    best = {}
    for row in res["matmul"]:
        best[row["dtype"]] = max(best.get(row["dtype"], 0.0), row["tflops"])
    res["throughput_tflops"] = best
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_check.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the CPU test of this script)")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--test-timeout", type=int, default=100)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine (torch.cuda.is_available() is False); nothing measured")
        return 0
    if device.type == "cpu":
        torch.set_num_threads(1)
    repeats = args.repeats or (2 if args.quick else 5)
    t0 = time.perf_counter()
    report = {"schema_version": SCHEMA_VERSION, "command": " ".join([sys.executable, *sys.argv]),
              "quick": args.quick, "environment": environment(device), "errors": {}}
    parts = [("tests", (lambda: {"skipped": "--skip-tests"}) if args.skip_tests else
              (lambda: run_tests(out, args.test_timeout))),
             ("cost", (lambda: {"skipped": "--skip-cost"}) if args.skip_cost else (lambda: run_cost(out, device, args.quick))),
             ("ch13_dtype_timings", lambda: ch13_dtype_timings(device, args.quick, repeats))]
    for key, fn in parts:
        t = time.perf_counter()
        try:
            report[key] = fn()
        except Exception as e:  # record and go on: one broken part must not cost the others
            report[key] = None
            report["errors"][key] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
        print(f"gpu_check: {key} done in {time.perf_counter() - t:.0f} s", flush=True)
        report.setdefault("seconds_per_part", {})[key] = time.perf_counter() - t
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1))  # partial results survive a kill
    report["seconds"] = time.perf_counter() - t0
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(f"gpu_check: wrote {out / 'gpu_check.json'} in {report['seconds']:.0f} s"
          + (f"; errors in {sorted(report['errors'])}" if report["errors"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
