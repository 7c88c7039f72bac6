"""The language-model benchmark (GPT-2 and Llama from tiny configurations on the standard
library's bytes) under the book's protocol, and the measurements of why Iso's step is the
wrong size there. Both modes are resumable: every finished run is in the output file, and
a restarted command runs only what is missing.

Usage::

    python scripts/lm_benchmark.py                 # pilot, then 300 and 1200 steps: results/lm_benchmark.json
    python scripts/lm_benchmark.py --plan          # the pilot only, then the planned cost of every cell
    python scripts/lm_benchmark.py --mechanism     # after the benchmark: results/lm_mechanism.json.gz
    python scripts/lm_benchmark.py --summary       # the tables of a saved benchmark file
    python scripts/lm_benchmark.py --mechanism-summary   # the mechanism's numbers
    python scripts/lm_benchmark.py --size tiny --protocol smoke --out /tmp/b.json   # seconds (tests)

The protocol (:mod:`isolab.book.lm_bench_protocol`) and the sizing are described in
``results/lm_benchmark_README.md``. One thread (``--threads``), as the saved runs used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book import lm_bench_protocol as BP, lm_benchmark as B, lm_mechanism as M  # noqa: E402
from isolab.book.lm_protocol import load_data  # noqa: E402

BENCH_OUT = ROOT / "results" / "lm_benchmark.json"
MECH_OUT = ROOT / "results" / "lm_mechanism.json.gz"
#: the mechanism's optimizers: per-layer norms along a run, the seed spread, the profile
NORMS = ("iso", "isoadam", "muon", "adamw", "iso_norm", "iso_polar")
EARLY = {"as tuned": {}, "batch statistics, fresh roots": {"beta_cov": 0.0, "root_interval": 1},
         "fresh roots": {"root_interval": 1}, "statistics warm-up 5 %": {"warmup_fraction": 0.05}}
SEEDS = {"llama": ("isoadam", "muon", "adamw"), "gpt2": ("isoadam",)}
PROFILE = ("adamw", "muon", "soap", "iso", "isoadam")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _save(path: Path, obj: dict) -> None:
    M.write_json(path, obj)


def _rounded(x, digits=5):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else x
    if isinstance(x, list):
        return [_rounded(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _rounded(v, digits) for k, v in x.items()}
    return x


def tuned_hyper(bench: dict, arch: str, name: str, steps: int) -> dict:
    """The benchmark's choice for ``name`` at ``steps`` (else at any budget, else its pilot rate
    with the knobs at their reference)."""
    for T in [steps] + sorted(bench["protocol"]["budgets"], reverse=True):
        s = bench["searches"].get(f"{arch}/{name}/{T}")
        if s and s["chosen"]:
            return dict(s["chosen"])
    h = {m.key: B.REFERENCE[m.key] for m in B.KNOBS[name] if m.key in B.REFERENCE} | \
        {"lr": bench["pilot"][arch][name]["best"]}
    if B.two_rates(name):
        h["side_lr"] = bench["pilot"][arch]["adamw"]["best"]
    return h


def mechanism(bench_path: Path, out: Path, size: str, profile_sizes=("full", None), profile_rounds: int = 5,
              profile_steps: int = 30) -> dict:
    """The four measurements of :mod:`isolab.book.lm_mechanism`, each run saved as it finishes;
    the profile at ``profile_sizes`` (``None``: the benchmark's size)."""
    bench = json.loads(bench_path.read_text())
    if bench["size"] != size:
        raise ValueError(f"{bench_path} is at size {bench['size']!r}, not {size!r}")
    res = M.read_json(out) if out.exists() else {"size": size, "bench": str(bench_path.name), "runs": {},
                                                             "commands": []}
    res["commands"].append({"argv": [Path(sys.argv[0]).name, *sys.argv[1:]],
                            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "environment": BP.environment()})
    P = bench["protocol"]
    short, long = min(P["budgets"]), max(P["budgets"])
    cfg = B.SIZES[size]
    data = load_data(cfg["context"], tune_windows=P["tune_windows"], test_windows=P["test_windows"])
    seed0 = P["heldout_seeds"][0]

    def once(key, fn):
        if key not in res["runs"]:
            t = time.perf_counter()
            res["runs"][key] = _rounded(fn())
            res["runs"][key]["seconds"] = time.perf_counter() - t
            _save(out, res)
            log(f"mechanism {key}: {res['runs'][key]['seconds']:.0f} s")
        return res["runs"][key]

    for arch in B.ARCHS:
        for name in NORMS:
            h = tuned_hyper(bench, arch, name, long)
            once(f"norms/{arch}/{name}/{long}", lambda: {"hyper": h, **M.trace(
                name, h, long, seed0, arch=arch, size=size, data=data, probe_every=25)})
    for arch in B.ARCHS:
        for name in ("iso", "isoadam"):
            for label, change in EARLY.items():
                h = dict(tuned_hyper(bench, arch, name, short))
                over = dict(change)
                if "warmup_fraction" in over:
                    over["warmup_steps"] = round(over.pop("warmup_fraction") * short)
                once(f"early/{arch}/{name}/{label}", lambda: {"hyper": h, "overrides": over, **M.trace(
                    name, h, short, seed0, arch=arch, size=size, data=data, record_whitening=True, overrides=over)})
    for arch, names in SEEDS.items():
        for name in names:
            for T in (short, long):
                h = tuned_hyper(bench, arch, name, T)
                for s in P["heldout_seeds"]:
                    once(f"seeds/{arch}/{name}/{T}/{s}", lambda: _seed_run(name, h, T, s, arch, size, data))
    for arch in B.ARCHS:
        for psize in [p or size for p in profile_sizes]:
            hy = {n: tuned_hyper(bench, arch, n, short) for n in PROFILE}
            once(f"profile/{arch}/{psize}", lambda: {"hypers": hy, "tokens_per_step": B.SIZES[psize]["batch"] *
                                                     B.SIZES[psize]["context"], "ms": M.profile(
                PROFILE, hy, arch=arch, size=psize, data=data if psize == size else load_data(
                    B.SIZES[psize]["context"], tune_windows=32, test_windows=32), rounds=profile_rounds,
                steps=profile_steps, skip=min(10, profile_steps))})
    return res


def _seed_run(name, h, T, s, arch, size, data):
    r = M.trace(name, h, T, s, arch=arch, size=size, data=data)
    dn = torch.tensor(r["dir_norm"], dtype=torch.float64)
    rs = torch.tensor(r["rel_step"], dtype=torch.float64)
    return {"hyper": h, "train_loss": r["train_loss"], "spikes": M.spikes(r["train_loss"]),
            "max_rel_step": rs.max(dim=1).values.tolist(), "median_dir_norm": dn.median(dim=1).values.tolist(),
            "layers": r["layers"], "error": r.get("error")}


def print_summary(path: Path) -> None:
    res = json.loads(path.read_text())
    summ = BP.summary(res)
    for cell, v in summ.items():
        per = v["optimizers"]
        print(f"\n== {cell} steps: held-out loss (nats/byte), median over {len(v['seeds'])} seeds "
              f"[order-statistic interval, coverage]; ms/step median [min, max over seeds]; ratio to AdamW")
        best = min(per, key=lambda n: per[n]["loss"]["median"])
        for n in sorted(per, key=lambda n: per[n]["loss"]["median"]):
            L, t = per[n]["loss"], per[n]["step_ms"]
            ratio = per[n].get("time_ratio_to_adamw")
            rtxt = f"{ratio['median']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]" if ratio else "-"
            d = v["paired"].get(n, {}).get(best)
            dtxt = "" if d is None else f"  vs {best}: {d['median']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]" + \
                (" *" if d["low"] > 0 or d["high"] < 0 else "")
            print(f"{B.LABELS[n]:32s} {L['median']:.4f} [{L['low']:.4f}, {L['high']:.4f}] ({100 * L['coverage']:.1f} %)"
                  f"  {t['median']:6.1f} [{t['min']:.1f}, {t['max']:.1f}] ms  x{rtxt}{dtxt}")


def print_mechanism(path: Path) -> None:
    """The mechanism's numbers (:func:`isolab.book.lm_mechanism.summarize`) as short tables."""
    s = M.summarize(M.read_json(path)["runs"])
    print("\n== Iso's batch-step norm on the probes / Muon's norm (median over layers), at probe steps; "
          "largest ρ; direction norm / Muon's and relative step, steps 1-25, 26-300, 301-end")
    for key, v in s["norms"].items():
        picks = [i for i, t in enumerate(v["probe_step"]) if t in (0, 25, 100, 300, 600, 1200)]
        probes = " ".join(f"{v['probe_step'][i]}:{v['iso_norm_over_muon'][i]:.3f}" for i in picks)
        print(f"{key:28s} √Σρ²/Muon {probes}"
              + f" | ρ_max {v['top_rho'][-1]:.3f} | dir/Muon " + " ".join(f"{x:.3f}" for x in v["dir_norm_over_muon"])
              + " | ‖ΔW‖/‖W‖ " + " ".join(f"{x:.2e}" for x in v["rel_step"]))
    print("\n== the first steps: whitening lag of the roots in use (input, output side), whitened norm / Muon's "
          "(steps 1-25, 26-end), last training loss")
    for key, v in s["early"].items():
        print(f"{key:52s} lag {v['lag_x']:.3g} {v['lag_g']:.3g} | white/Muon "
              + " ".join(f"{x:.3f}" for x in v["whitened_over_muon"]) + f" | loss {v['last_loss']:.4f}")
    print("\n== seed spread: last training loss per seed, spikes, rank correlation of the loss with the largest "
          "spike and with the largest relative step")
    for key, v in s["seeds"].items():
        print(f"{key:24s} loss " + " ".join(f"{x:.3f}" for x in v["last_loss"]) + f" | spikes {v['spikes']} | "
              f"corr {v['corr_loss_spike']:.2f} {v['corr_loss_rel_step']:.2f}")
    print("\n== profile: ms per step (median over rounds)")
    for key, v in s["profile"].items():
        base = v["ms"].get("adamw", {}).get("total")
        for n, c in v["ms"].items():
            print(f"{key:22s} {n:8s} " + " ".join(f"{k} {x:.1f}" for k, x in c.items())
                  + (f" | x{c['total'] / base:.2f} AdamW" if base else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=sorted(B.SIZES))
    ap.add_argument("--protocol", default="default", choices=sorted(BP.PROTOCOLS))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--archs", nargs="+", default=list(B.ARCHS), choices=B.ARCHS)
    ap.add_argument("--optimizers", nargs="+", default=list(B.OPTIMIZERS), choices=B.OPTIMIZERS)
    ap.add_argument("--budgets", nargs="+", type=int, default=None, help="a subset of the protocol's budgets")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plan", action="store_true", help="the pilot, then the planned cost of every cell")
    ap.add_argument("--mechanism", action="store_true", help="the mechanism's measurements (after the benchmark)")
    ap.add_argument("--bench", type=Path, default=None, help="the benchmark file the mechanism reads")
    ap.add_argument("--summary", action="store_true", help="print the tables of a saved benchmark file")
    ap.add_argument("--mechanism-summary", action="store_true", help="print the mechanism file's numbers")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.mechanism_summary:
        print_mechanism(a.out or MECH_OUT)
        return 0
    if a.summary:
        print_summary(a.out or BENCH_OUT)
        return 0
    if a.mechanism:
        mechanism(a.bench or BENCH_OUT, a.out or MECH_OUT, a.size)
        return 0
    bench = BP.Benchmark(a.out or BENCH_OUT, size=a.size, protocol=a.protocol, archs=a.archs,
                         optimizers=a.optimizers, log=log)
    if a.budgets and not set(a.budgets) <= set(bench.protocol["budgets"]):
        ap.error(f"--budgets must be among the protocol's {bench.protocol['budgets']}")
    if a.plan:
        for arch in a.archs:
            bench.pilot(arch)
        total = 0.0
        for T in a.budgets or bench.protocol["budgets"]:
            for arch in a.archs:
                for n in a.optimizers:
                    c = BP.cell_cost(bench.results, arch, n, T)
                    total += c["seconds"]
                    log(f"plan {arch} {n:13s} T={T}: {c['steps']} steps, {c['seconds'] / 60:.1f} min")
        log(f"plan: {total / 3600:.2f} h of training at the pilot's step times (evaluation not counted)")
        return 0
    bench.run_all(a.budgets)
    print_summary(bench.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
