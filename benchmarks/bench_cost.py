"""A full training iteration's cost (forward + backward + step) against AdamW, in one run.

Run:  python benchmarks/bench_cost.py [--models transformer mlp] [--device cpu] [--json out.json]

Models (issue 19):

- ``transformer``: the full-size model of ``scripts/train_transformer.py``
  (:class:`isolab.book.lm.TransformerLM`, d_model 128, 4 layers, 4 heads, context 128, about
  0.8 M matrix parameters), 8192 tokens per step (batch 64 x context 128), mean next-byte
  cross-entropy on random bytes.
- ``mlp``: 4 x ``nn.Linear(512, 512)`` with tanh between them, batch 256, mean squared error
  to a random target.

Optimizers, each on its own copy of the model, all timed in the same run: ``torch.optim.AdamW``
(the reference, 1.00), IsoAdam and Iso **with their default settings** (only ``lr`` given),
isolab's Muon, ``torch.optim.Muon`` on the hidden matrices with AdamW on the rest, and
pytorch-optimizer's SOAP (skipped with a note where the package is missing). ``--extra`` adds
IsoAdam with the old defaults (statistics every step, roots every 10 steps, all rows).
On CUDA, IsoAdam also runs with ``root_method="newton"`` (matmul-only roots), Muon with
bfloat16 Newton-Schulz, statistics stay float32.

Protocol. One thread on a CPU (``--threads``). After ``--warmup`` untimed steps, ``--rounds``
rounds; in each round every optimizer (in a rotated order) takes its next block of steps, each
step timed on its own (forward + backward, and ``step()``, separately). Optimizers that refresh
something periodically (Iso/IsoAdam: statistics every ``stat_interval`` steps, roots every
``root_interval``; SOAP: every ``precondition_frequency``) are timed over a whole refresh
period at least, and their step times are grouped by *kind* of step (e.g. "statistics and
roots", "neither"); the cost per iteration is ``Σ_kind share(kind) · median(kind)``, the shares
those of the optimizer's schedule, so that a refresh is amortized exactly and one slow step
(a busy machine) does not move the median. The ratio is that cost over AdamW's median. The
spread is the 10-90 % range of the same ratio over 400 bootstrap resamples of the timed steps.
``best-of`` is the same estimate from the fastest step of each kind (and AdamW's fastest): what
an idle machine approaches, since other load only adds time. PASS/FAIL is on the median ratio.

Where IsoAdam's cost goes (measured from the same steps, per iteration):
``hooks`` = forward + backward on a step without statistics minus AdamW's forward + backward;
``statistics`` = (forward + backward on a statistics step minus one without) / stat_interval;
``roots`` = (``step()`` on a root step minus one on a step with neither) / root_interval;
``update`` = ``step()`` on a step with neither minus AdamW's ``step()`` (the whitening products
``P_G g P_X`` and Adam's arithmetic beyond AdamW's own).

Arithmetic floor (timed in the same rounds, as one more runner): per weight IsoAdam whitens,
``XᵀX`` and ``GᵀG`` on the rows its statistics use (``min(b, stat_rows)``, by
:func:`isolab.linalg.gram`, divided by ``stat_interval``) and ``C_out^{-1/2} · grad ·
C_in^{-1/2}``, float32, on random tensors of the model's shapes. ``floor`` = (AdamW's
iteration + that time) / AdamW's iteration: the smallest ratio any exact fp32 two-sided
whitening with statistics at IsoAdam's schedule could reach (it leaves out the roots, the
hooks and Adam's arithmetic). Against a target it says whether the target is reachable at all:
applying the roots alone is ``nm(n + m)`` multiply-adds per layer against ``3bnm`` for forward
+ backward, ``(n + m)/3b`` = 133 % on the MLP.

Targets (issue 19), printed PASS/FAIL: IsoAdam default <= 1.25 x AdamW on the transformer,
<= 2 x on the MLP.

Quality (``--quality transformer|mlp [--variant ...] [--seeds 0 1 2] [--steps N]``): instead of
timing, the final loss of AdamW, of IsoAdam with full statistics (``stat_interval=1,
stat_rows=None, root_interval=10``) and of IsoAdam with each ``--variant`` (``defaults``: the
library's), per seed, with the paired difference to full statistics; ``--only-variants``
skips the first two. The Transformer is :mod:`isolab.book.lm`'s at d_model 128 with 2 layers,
16 x 128 tokens per step, on the standard library's source (validation loss); the MLP a
4 x Linear(256) + tanh student of a random teacher of the same shape (held-out MSE).

Examples::

    python benchmarks/bench_cost.py                       # the cost table, both models (~5 min, idle CPU)
    python benchmarks/bench_cost.py --extra --variant stat_interval=10,root_interval=20
    python benchmarks/bench_cost.py --quality mlp --steps 300 --variant stat_rows=128
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from isolab.optim import Iso, IsoAdam, Muon, split_parameters

TARGETS = {"transformer": 1.25, "mlp": 2.0}
TARGET_OPTIMIZER = "IsoAdam (default)"


# ----------------------------------------------------------------------------- problems
def transformer_problem(device, quick=False):
    from isolab.book import lm

    cfg = lm.LMConfig(d_model=32, n_layers=1, n_heads=2, context=16) if quick else lm.LMConfig(
        d_model=128, n_layers=4, n_heads=4, context=128)
    batch = 4 if quick else 64
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(4):
        x = torch.randint(0, cfg.vocab, (batch, cfg.context + 1), generator=g)
        data.append((x[:, :-1].to(device), x[:, 1:].to(device)))

    def make():
        return lm.TransformerLM(cfg, seed=0).to(device)

    return make, data, lambda model, x, y: model.loss(x, y)


def mlp_problem(device, quick=False):
    width, batch = (32, 16) if quick else (512, 256)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(batch, width, generator=g).to(device), torch.randn(batch, width, generator=g).to(device))
            for _ in range(4)]

    def make():
        torch.manual_seed(0)
        layers = []
        for i in range(4):
            layers += [nn.Linear(width, width), nn.Tanh()]
        return nn.Sequential(*layers[:-1]).to(device)

    return make, data, lambda model, x, y: F.mse_loss(model(x), y)


PROBLEMS = {"transformer": transformer_problem, "mlp": mlp_problem}


def _head(model):
    return getattr(model, "head", "auto")


class _Pair:
    """Two optimizers stepped together (``torch.optim.Muon`` takes only matrices)."""

    def __init__(self, *opts):
        self.opts = opts

    def zero_grad(self, set_to_none=True):
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.opts:
            o.step()


def _torch_muon(model):
    split = split_parameters(model, head=_head(model) if _head(model) != "auto" else "auto")
    rest = [p for k in ("embedding", "head", "vector") for p in split[k].values()]
    opts = [torch.optim.Muon(list(split["matrix"].values()), lr=0.02, weight_decay=0.0)]
    if rest:
        opts.append(torch.optim.AdamW(rest, lr=1e-3, weight_decay=0.0))
    return _Pair(*opts)


def parse_variant(text):
    """``"stat_interval=10,root_interval=20"`` -> keyword arguments of IsoAdam (ints, floats, None, names)."""
    kw = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if not _:
            raise ValueError(f"--variant items are key=value, got {item!r}")
        for conv in (int, float):
            try:
                kw[key.strip()] = conv(value)
                break
            except ValueError:
                continue
        else:
            kw[key.strip()] = None if value == "None" else value.strip()
    return kw


def optimizers(device, extra=False, variants=()):
    """``{name: (factory(model), period, kind(t))}``: ``kind(t)`` labels step ``t`` (1-based)."""
    out = {"AdamW": (lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3), 1, None)}
    iso_like = {
        "IsoAdam (default)": lambda m: IsoAdam(m, lr=1e-3, head=_head(m)),
        "Iso (default)": lambda m: Iso(m, lr=0.005, adam_lr=1e-3, head=_head(m)),
    }
    if extra:
        iso_like["IsoAdam (old defaults)"] = lambda m: IsoAdam(
            m, lr=1e-3, stat_interval=1, root_interval=10, stat_rows=None, head=_head(m))
    for text in variants:
        kw = parse_variant(text)
        iso_like[f"IsoAdam ({text})"] = lambda m, kw=kw: IsoAdam(m, lr=1e-3, head=_head(m), **kw)
    if device.type == "cuda":
        iso_like["IsoAdam (default, newton roots)"] = lambda m: IsoAdam(m, lr=1e-3, root_method="newton", head=_head(m))
    for name, f in iso_like.items():
        out[name] = (f, None, "iso")
    dtype = torch.bfloat16 if device.type == "cuda" else None
    out["Muon (isolab)"] = (lambda m: Muon(m, lr=0.02, adam_lr=1e-3, compute_dtype=dtype, head=_head(m)), 1, None)
    if hasattr(torch.optim, "Muon"):
        out["torch.optim.Muon"] = (_torch_muon, 1, None)
    try:
        from pytorch_optimizer import SOAP
    except ImportError:
        pass
    else:
        out["SOAP (pytorch-optimizer)"] = (lambda m: SOAP(m.parameters(), lr=3e-3), 10, "every")
    return out


def iso_schedule(opt):
    """``(period, kind(t))`` of an Iso/IsoAdam optimizer from its (first) matrix group."""
    g = next(g for g in opt.param_groups if g["algorithm"] != "adam")
    s, r = g["stat_interval"], g["root_interval"]

    def kind(t):
        return ("stats" if (t - 1) % s == 0 else "") + ("+roots" if (t - 1) % r == 0 else "")

    return math.lcm(s, r), kind, (s, r)


# ----------------------------------------------------------------------------- timing
def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


class Runner:
    def __init__(self, name, factory, make, data, loss_fn, device):
        self.name, self.device, self.data, self.loss_fn = name, device, data, loss_fn
        self.model = make()
        self.opt = factory(self.model)
        self.t = 0
        self.fb, self.st, self.kinds = [], [], []

    def iterate(self, timed=True, kind=None):
        x, y = self.data[self.t % len(self.data)]
        self.t += 1
        sync(self.device)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(self.model, x, y).backward()
        sync(self.device)
        t1 = time.perf_counter()
        self.opt.step()
        sync(self.device)
        t2 = time.perf_counter()
        if timed:
            self.fb.append(t1 - t0)
            self.st.append(t2 - t1)
            self.kinds.append(kind(self.t) if kind else "")


def amortized(times, kinds, shares, stat=statistics.median):
    """``Σ_kind share · stat(times of that kind)`` over the kinds in ``shares`` (``stat``: median,
    or ``min`` for the best-of estimate, which a busy machine can only make slower)."""
    by = {}
    for t, k in zip(times, kinds):
        by.setdefault(k, []).append(t)
    missing = [k for k in shares if k not in by]
    if missing:
        raise RuntimeError(f"no timed step of kind {missing}: time a whole period")
    return sum(w * stat(by[k]) for k, w in shares.items())


def shares_of(period, kind):
    counts = {}
    for t in range(1, period + 1):
        k = kind(t)
        counts[k] = counts.get(k, 0) + 1
    return {k: c / period for k, c in counts.items()}


def run_model(model_name, device, rounds, block, warmup, extra, quick, log=print, variants=(), only=None):
    make, data, loss_fn = PROBLEMS[model_name](device, quick)
    runners, info = [], {}
    for name, (factory, period, kind) in optimizers(device, extra, variants).items():
        if only and name != "AdamW" and not any(name.startswith(o) for o in only):
            continue
        r = Runner(name, factory, make, data, loss_fn, device)
        if kind == "iso":
            period, kfun, (s, ri) = iso_schedule(r.opt)
            info[name] = dict(stat_interval=s, root_interval=ri)
        elif kind == "every":
            kfun = lambda t, p=period: "refresh" if t % p == 0 else ""  # noqa: E731
        else:
            kfun = lambda t: ""  # noqa: E731
        r.period, r.kind = period, kfun
        r.steps_per_round = max(block, math.ceil(period / rounds))
        runners.append(r)
        if name == TARGET_OPTIMIZER:
            floor = FloorRunner(floor_shapes(factory, make, data, loss_fn), device)
            floor.steps_per_round, floor.kind = block, None
            runners.append(floor)
    for r in runners:  # warm-up: the first step computes the first roots
        for _ in range(warmup):
            r.iterate(timed=False)
    order = list(range(len(runners)))
    rng = random.Random(0)
    for rnd in range(rounds):
        rng.shuffle(order)
        for i in order:
            r = runners[i]
            for _ in range(r.steps_per_round):
                r.iterate(kind=r.kind)
        log(f"  {model_name}: round {rnd + 1}/{rounds} done", file=sys.stderr)

    floor = next((r for r in runners if isinstance(r, FloorRunner)), None)
    runners = [r for r in runners if r is not floor]
    ref = runners[0]
    ref_total = [a + b for a, b in zip(ref.fb, ref.st)]
    rows = []
    boot = random.Random(1)
    for r in runners:
        shares = shares_of(r.period, r.kind)
        total = [a + b for a, b in zip(r.fb, r.st)]
        cost = amortized(total, r.kinds, shares)
        ratio = cost / statistics.median(ref_total)
        best = amortized(total, r.kinds, shares, stat=min) / min(ref_total)
        samples = []
        for _ in range(400):
            idx = [boot.randrange(len(total)) for _ in total]
            jdx = [boot.randrange(len(ref_total)) for _ in ref_total]
            try:
                c = amortized([total[i] for i in idx], [r.kinds[i] for i in idx], shares)
            except RuntimeError:
                continue
            samples.append(c / statistics.median([ref_total[j] for j in jdx]))
        samples.sort()
        lo = samples[int(0.1 * (len(samples) - 1))] if samples else float("nan")
        hi = samples[int(0.9 * (len(samples) - 1))] if samples else float("nan")
        rows.append(dict(optimizer=r.name, ms=1e3 * cost, ratio=ratio, lo=lo, hi=hi, best_of=best, steps=len(total),
                         settings=info.get(r.name)))
    out = dict(model=model_name, rows=rows, adamw_ms=1e3 * statistics.median(ref_total))
    target = next((r for r in runners if r.name == TARGET_OPTIMIZER), None)
    if target is not None:
        out["breakdown"] = breakdown(target, ref, info[TARGET_OPTIMIZER])
    if floor is not None:
        out["floor"] = floor_result(floor, ref)
    return out


def breakdown(r, ref, settings):
    """Where IsoAdam's extra cost per iteration goes (ms), from the timed steps."""
    by_fb, by_st = {}, {}
    for a, b, k in zip(r.fb, r.st, r.kinds):
        by_fb.setdefault(k, []).append(a)
        by_st.setdefault(k, []).append(b)
    med = lambda d, k: statistics.median(d[k]) if k in d else float("nan")  # noqa: E731
    s, ri = settings["stat_interval"], settings["root_interval"]
    plain = "" if "" in by_fb else "stats"  # a step with neither refresh (or, at stat_interval 1, stats only)
    fb_ref, st_ref = statistics.median(ref.fb), statistics.median(ref.st)
    root_kind = "stats+roots" if "stats+roots" in by_st else "+roots"
    parts = {
        "hooks": med(by_fb, plain) - fb_ref if plain == "" else float("nan"),
        "statistics": (med(by_fb, "stats") - med(by_fb, "")) / s if ("stats" in by_fb and "" in by_fb) else
        (med(by_fb, "stats") - fb_ref),  # at stat_interval 1: hooks and statistics together
        "roots": (med(by_st, root_kind) - med(by_st, plain)) / ri,
        "update": med(by_st, plain) - st_ref,
    }
    if plain != "":
        parts["hooks"] = 0.0  # included in "statistics"
    return {k: 1e3 * v for k, v in parts.items()} | {"adamw_forward_backward": 1e3 * fb_ref,
                                                     "adamw_step": 1e3 * st_ref,
                                                     "hooks_in_statistics": plain != ""}


# ----------------------------------------------------------------------------- arithmetic floor
def floor_shapes(factory, make, data, loss_fn):
    """``[(rows, n, m, stat_interval)]`` of each weight IsoAdam whitens: the rows its statistics
    use (``min(b, stat_rows)``), the weight's input size ``n`` and output size ``m``, read from a
    fresh model and optimizer after one forward + backward (the optimizer's own settings)."""
    model = make()
    opt = factory(model)
    x, y = data[0]
    opt.zero_grad(set_to_none=True)
    loss_fn(model, x, y).backward()
    out = []
    for group in opt.param_groups:
        if group["algorithm"] == "adam" or not group.get("whiten", True):
            continue
        for p in group["params"]:
            used = opt.statistics.used_rows(opt._site_of[p])  # min(b, the layer's row limit)
            out.append((used, p[0].numel(), p.shape[0], group["stat_interval"]))
    if not out:
        raise RuntimeError("the optimizer whitens no weight: no arithmetic floor to time")
    opt.statistics.remove()
    return out


class FloorRunner:
    """The matmuls no exact fp32 two-sided whitening can skip, on random float32 tensors of the
    model's shapes: per whitened weight ``XᵀX`` and ``GᵀG`` on the rows used
    (:func:`isolab.linalg.gram`, the library's cheapest; weighted ``1/stat_interval``) and
    ``C_out^{-1/2} · grad · C_in^{-1/2}`` (two products, every step). No roots, no hooks, no
    Adam arithmetic: what any implementation adds to AdamW's iteration at least."""

    name = "arithmetic floor"

    def __init__(self, shapes, device):
        g = torch.Generator().manual_seed(0)
        rnd = lambda *s: torch.randn(*s, generator=g).to(device)  # noqa: E731
        self.shapes, self.device = shapes, device
        self.items = [(rnd(b, n), rnd(b, m), rnd(m, n), rnd(n, n), rnd(m, m), s) for b, n, m, s in shapes]
        self.gram, self.apply = [], []

    def iterate(self, timed=True, kind=None):
        from isolab import linalg

        gram = apply = 0.0
        for x, gout, grad, r_in, r_out, s in self.items:
            sync(self.device)
            t0 = time.perf_counter()
            linalg.gram(x), linalg.gram(gout)
            sync(self.device)
            t1 = time.perf_counter()
            r_out @ grad @ r_in
            sync(self.device)
            t2 = time.perf_counter()
            gram += (t1 - t0) / s
            apply += t2 - t1
        if timed:
            self.gram.append(gram)
            self.apply.append(apply)


def floor_result(floor, ref):
    """The floor's ratio: (AdamW's median iteration + the floor's median) / AdamW's median, and
    the best-of estimate from the fastest of each."""
    ref_total = [a + b for a, b in zip(ref.fb, ref.st)]
    per = [a + b for a, b in zip(floor.gram, floor.apply)]
    med_ref, med = statistics.median(ref_total), statistics.median(per)
    return dict(ms=1e3 * med, gram_ms=1e3 * statistics.median(floor.gram),
                apply_ms=1e3 * statistics.median(floor.apply), ratio=(med_ref + med) / med_ref,
                best_of=(min(ref_total) + min(per)) / min(ref_total), steps=len(per),
                shapes=[dict(rows=b, n=n, m=m, stat_interval=s) for b, n, m, s in floor.shapes])


# ----------------------------------------------------------------------------- quality
def quality_transformer(settings: dict, seed: int, steps: int, log=None) -> float:
    """Final validation loss (nats/byte) of IsoAdam (or AdamW, ``settings=None``) on the
    byte-level Transformer of :mod:`isolab.book.lm` (d_model 128, 2 layers, batch 16 x 128
    tokens, Adam's hyperparameters of the chapter), ``steps`` steps, model seed ``seed``."""
    from isolab.book import lm

    model_cfg = lm.LMConfig(d_model=128, n_layers=2, n_heads=4, context=128)
    cfg = lm.TrainConfig(steps=steps, batch=16, warmup=max(1, steps // 10), eval_interval=steps, seed=seed,
                         data_seed=seed + 1, extra=dict(settings or {}))
    data = lm.stdlib_corpus(max_bytes=4_000_000)
    train_data, val_data = lm.split_corpus(data)
    rec = lm.train("adam" if settings is None else "isoadam", model_cfg, cfg, train_data, val_data, log=log)
    return rec["val_loss"][-1]


def quality_mlp(settings: dict, seed: int, steps: int, width: int = 256, batch: int = 256) -> float:
    """Held-out mean squared error of a 4 x Linear(width) + tanh student fitting a random
    teacher of the same shape (inputs N(0, I), targets the teacher's outputs), IsoAdam
    (AdamW for ``settings=None``) at lr 1e-3, ``steps`` steps of ``batch`` rows."""
    g = torch.Generator().manual_seed(1000 + seed)

    def net(gen):
        layers = []
        for i in range(4):
            lin = nn.Linear(width, width)
            with torch.no_grad():
                lin.weight.copy_(torch.randn(width, width, generator=gen) * (1.5 / math.sqrt(width)))
                lin.bias.zero_()
            layers += [lin, nn.Tanh()]
        return nn.Sequential(*layers[:-1])

    teacher = net(torch.Generator().manual_seed(7))
    torch.manual_seed(seed)
    student = nn.Sequential(*[m for i in range(4) for m in (nn.Linear(width, width), nn.Tanh())][:-1])
    opt = (torch.optim.AdamW(student.parameters(), lr=1e-3) if settings is None else
           IsoAdam(student, lr=1e-3, **settings))
    x_test = torch.randn(2048, width, generator=g)
    with torch.no_grad():
        y_test = teacher(x_test)
    for _ in range(steps):
        x = torch.randn(batch, width, generator=g)
        with torch.no_grad():
            y = teacher(x)
        opt.zero_grad(set_to_none=True)
        F.mse_loss(student(x), y).backward()
        opt.step()
    with torch.no_grad():
        return float(F.mse_loss(student(x_test), y_test))


QUALITY = {"transformer": quality_transformer, "mlp": quality_mlp}


def library_schedule() -> dict:
    """IsoAdam's default ``stat_interval``, ``stat_rows`` and ``root_interval``."""
    import inspect

    params = inspect.signature(IsoAdam).parameters
    return {k: params[k].default for k in ("stat_interval", "stat_rows", "root_interval")}


def run_quality(model, variants, seeds, steps, only_variants=False):
    """Final losses of AdamW, IsoAdam with full statistics (stat_interval=1, root_interval=10,
    all rows: the old defaults) and each variant (``"defaults"``: the library's defaults), per
    seed; printed as mean ± sd and as the paired difference to full statistics."""
    configs = {} if only_variants else {
        "AdamW": None, "IsoAdam full statistics (old defaults)": dict(stat_interval=1, root_interval=10, stat_rows=None)}
    for text in variants:  # "defaults": the library's current schedule, named (lm pins its own otherwise)
        configs["IsoAdam (defaults)" if text == "defaults" else f"IsoAdam ({text})"] = (
            library_schedule() if text == "defaults" else parse_variant(text))
    out = {}
    for name, kw in configs.items():
        losses = []
        for seed in seeds:
            t = time.perf_counter()
            losses.append(QUALITY[model](kw, seed, steps))
            print(f"  {model} {name} seed {seed}: {losses[-1]:.4f} ({time.perf_counter() - t:.0f} s)",
                  file=sys.stderr, flush=True)
        out[name] = losses
    print(f"\nquality on {model}: final loss after {steps} steps, seeds {list(seeds)}")
    base = out.get("IsoAdam full statistics (old defaults)", next(iter(out.values())))
    for name, losses in out.items():
        mean = statistics.fmean(losses)
        sd = statistics.stdev(losses) if len(losses) > 1 else float("nan")
        diff = [a - b for a, b in zip(losses, base)]
        print(f"  {name:52s} {mean:.4f} ± {sd:.4f}   vs full statistics: {statistics.fmean(diff):+.4f} "
              f"(per seed {', '.join(f'{d:+.4f}' for d in diff)})   losses {', '.join(f'{v:.4f}' for v in losses)}")
    return out


# ----------------------------------------------------------------------------- output
def print_table(res, file=sys.stdout):
    m = res["model"]
    print(f"\n{m}: full iteration (forward + backward + step) vs AdamW "
          f"(AdamW {res['adamw_ms']:.1f} ms per iteration)", file=file)
    print(f"  {'optimizer':34s} {'ms/iter':>9s} {'ratio':>7s}  {'10-90% (bootstrap)':>20s}  {'best-of':>7s}  steps",
          file=file)
    for r in res["rows"]:
        print(f"  {r['optimizer']:34s} {r['ms']:9.1f} {r['ratio']:7.2f}  [{r['lo']:6.2f}, {r['hi']:6.2f}]"
              f"      {r['best_of']:7.2f}  {r['steps']}", file=file)
    b = res.get("breakdown")
    if b:
        extra = sum(b[k] for k in ("hooks", "statistics", "roots", "update"))
        print(f"  where IsoAdam's extra {extra:.1f} ms/iter goes (AdamW: forward+backward "
              f"{b['adamw_forward_backward']:.1f} ms, step {b['adamw_step']:.1f} ms):", file=file)
        together = b.get("hooks_in_statistics", False)  # statistics every step: no step without them
        for k in ("statistics", "roots", "update") if together else ("hooks", "statistics", "roots", "update"):
            name = "hooks+stats" if (together and k == "statistics") else k
            print(f"    {name:11s} {b[k]:8.1f} ms  ({100 * b[k] / res['adamw_ms']:5.1f} % of AdamW's iteration)", file=file)
        if together:
            print("    (statistics every step: hooks and statistics are one difference, forward+backward minus "
                  "AdamW's, within the spread of those medians)", file=file)


def verdicts(results):
    lines = []
    for res in results:
        target = TARGETS.get(res["model"])
        row = next((r for r in res["rows"] if r["optimizer"] == TARGET_OPTIMIZER), None)
        if target is None or row is None:
            continue
        ok = row["ratio"] <= target
        line = (f"{'PASS' if ok else 'FAIL'}  {TARGET_OPTIMIZER} on {res['model']}: "
                f"{row['ratio']:.2f} x AdamW (target <= {target:g} x; 10-90% "
                f"[{row['lo']:.2f}, {row['hi']:.2f}])")
        entry = dict(model=res["model"], ratio=row["ratio"], target=target, passed=ok, best_of=row["best_of"])
        f = res.get("floor")
        if f:
            every = sorted({sh["stat_interval"] for sh in f["shapes"]})
            fresh = "fresh statistics every step" if every == [1] else f"statistics every {every} steps"
            rows_used = sorted({sh["rows"] for sh in f["shapes"]})
            line += (f"\n      floor  {f['ratio']:.2f} x AdamW (target <= {target:g} x; best-of {f['best_of']:.2f}): "
                     f"the least any exact fp32 two-sided whitening with {fresh} can cost\n"
                     f"             = AdamW's iteration + only XᵀX, GᵀG on {'/'.join(map(str, rows_used))} rows "
                     f"({f['gram_ms']:.1f} ms) and C_out^-1/2 grad C_in^-1/2 ({f['apply_ms']:.1f} ms), "
                     f"timed on random tensors of the model's shapes")
            entry.update(floor=f["ratio"], floor_best_of=f["best_of"])
        lines.append(entry | dict(line=line))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["transformer", "mlp"], choices=sorted(PROBLEMS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU (default 1)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=2, help="steps per round of optimizers without a refresh period")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--extra", action="store_true", help="also IsoAdam with the old defaults")
    ap.add_argument("--variant", action="append", default=[],
                    help="also IsoAdam with these settings, e.g. 'stat_interval=10,root_interval=20' (repeatable)")
    ap.add_argument("--only", nargs="+", help="time only the optimizers whose names start with these (AdamW always)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test of the script)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quality", choices=sorted(QUALITY),
                    help="instead of timing: final losses of AdamW, full statistics, the defaults and each --variant")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--only-variants", action="store_true", help="--quality: only the --variant configurations")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if args.quality:
        torch.set_num_threads(args.threads)
        return run_quality(args.quality, args.variant, args.seeds, args.steps, args.only_variants)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results = [run_model(m, device, args.rounds, args.block, args.warmup, args.extra, args.quick,
                         variants=args.variant, only=args.only) for m in args.models]
    for res in results:
        print_table(res)
    print()
    checks = verdicts(results)
    for c in checks:
        print(c["line"])
    wall = time.perf_counter() - t0
    print(f"\n(device {device}, {torch.get_num_threads() if device.type == 'cpu' else '-'} thread(s), "
          f"torch {torch.__version__}, {wall:.0f} s)")
    out = dict(device=str(device), threads=torch.get_num_threads(), torch=torch.__version__, results=results,
               targets=[{k: v for k, v in c.items() if k != "line"} for c in checks], seconds=wall,
               command=" ".join(["python", "benchmarks/bench_cost.py", *(argv if argv is not None else sys.argv[1:])]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
