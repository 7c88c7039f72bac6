r"""The machinery Iso and IsoAdam share: hooks, statistics across processes, roots, the whitening.

A whitened step of weight ``W ∈ R^{n×m}`` (rows ``b``, captured ``XᵀX``, ``GᵀG``):

1. *collect* (every process): the row count ``b`` and, on statistics steps, the sums, checked
   (they must belong to the gradient being stepped on, and be finite); under DDP summed over the
   processes (:func:`isolab.distributed.all_reduce_symmetric`; ``Σ_r G_rᵀG_r / W²`` because DDP's
   gradient is ``XᵀG`` of the stacked ``G_r/W``), under FSDP2 reduced onto the weight's owner;
   under ``torch.amp.GradScaler`` divided by the loss scale squared.
2. *prepare* (owner): the averages (:mod:`isolab.optim.covariance`) and, on refresh steps, the
   roots (:mod:`isolab.optim.roots`), as jobs that DDP can share among processes.
3. *direction* (owner): ``P_X (∇W/b) P_G`` (``P_G · weight.grad / b · P_X`` in torch's layout),
   where ``b`` makes the step ``iso_update(X, G)`` exactly when the statistics are the batch's;
   then :meth:`WhiteningOptimizer._transform_direction` (the identity; variants override it).
4. *post* (every process, its rows): Iso's momentum and step, IsoAdam's Adam.

What ``self.state[p]`` holds: ``step``, ``stat_step``, ``rows_s2``; ``cov_x``, ``cov_g`` when the
average has memory (``β > 0``, ``stat_interval > 1`` or warm-up); ``root_x``, ``root_g`` when
roots are reused (``root_interval > 1`` or the Newton warm start); ``basis_x``, ``basis_g`` with
``root_method="eigenbasis"``; ``shift_x``, ``shift_g`` in the lean state (then no averages); Iso's
``momentum_buffer``; IsoAdam's ``exp_avg``, ``exp_avg_sq``, ``adam_step``. Everything needed to
continue is there: a resumed run continues bitwise on a CPU.
"""

from __future__ import annotations

import math
import warnings
from collections import ChainMap

import torch
from torch import nn

from .. import distributed, fsdp, linalg, rules, updates
from ..nn import linear_like
from . import covariance, roots
from ._base import RoutedOptimizer, active_comm
from ._stage import MatrixJob
from ._validation import (
    check_beta,
    check_bool,
    check_choice,
    check_dtype,
    check_float,
    check_lr,
    check_nonneg,
    check_nonneg_int,
    check_positive_int,
)
from .capture import LayerStatistics, capturable, capture_sites, remove_inert_hooks
from .failures import UNCHANGED, UNCHANGED_ANYWHERE, Failure, StepFailed
from .routing import weight_layouts

__all__ = ["WhiteningOptimizer", "ATTENTION_FIX"]

#: What an error or warning says about a torch ``nn.MultiheadAttention``'s weights.
ATTENTION_FIX = (
    "nn.MultiheadAttention computes its projections inside F.multi_head_attention_forward, where no hook "
    "sees their inputs and output gradients; call isolab.nn.convert_attention(model) before building the "
    "optimizer (same outputs and state_dict, projections as nn.Linear layers) to whiten them"
)


def whitenable(model: nn.Module):
    """``({weight: site}, {weight: why not}, {site: [(name, module)]})``: the weights Iso can
    whiten (linear-like modules, ``groups=1`` 1-D/2-D convolutions) with their capture site, and
    the weight matrices it cannot, with the reason."""
    why, hidden = {}, set()
    for m in model.modules():
        if isinstance(m, nn.MultiheadAttention):
            for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                w = getattr(m, attr, None)
                if w is not None:
                    why[w] = ATTENTION_FIX
            why[m.out_proj.weight] = ATTENTION_FIX
            hidden.add(id(m.out_proj))
    for m in model.modules():
        if linear_like(m) is not None and not capturable(m) and isinstance(m, nn.modules.conv._ConvNd):
            if isinstance(m, (nn.Conv1d, nn.Conv2d)) and m.groups > 1:
                why[m.weight] = f"a grouped convolution (groups={m.groups}) has one weight matrix per group; not supported"
            else:
                why[m.weight] = (f"{type(m).__name__} is not supported (patch-view statistics exist for nn.Conv1d and "
                                 "nn.Conv2d with groups=1)")
    sites = capture_sites({n: m for n, m in model.named_modules() if capturable(m) and id(m) not in hidden})
    site_of = {members[0][1].weight: site for site, members in sites.items()}
    return site_of, why, sites


class WhiteningOptimizer(RoutedOptimizer):
    """Base of :class:`~isolab.optim.Iso` and :class:`~isolab.optim.IsoAdam` (see the module docstring)."""

    stat_keys = ("cov_x", "cov_g", "root_x", "root_g", "basis_x", "basis_g")
    _captures_output_gradients = True
    _copied = RoutedOptimizer._copied + ("sync_statistics", "distribute_roots", "_site_of", "_unwhitenable", "_sites")

    def __init__(self, model, params, defaults, adam_defaults, *, embeddings, head, others, sync_statistics=None,
                 process_group=None, distribute_roots=True, grad_scaler=None):
        cls = type(self).__name__
        if not isinstance(model, nn.Module):
            raise TypeError(f"{cls} needs the model (an nn.Module) to hook its linear layers, got "
                            f"{type(model).__name__}; pass parameter groups with params=...")
        try:
            if sync_statistics is not None and not isinstance(sync_statistics, bool):
                raise ValueError(f"sync_statistics must be None, True or False, got {sync_statistics!r}")
            distributed.check_process_group(process_group)
            check_bool(distribute_roots, "distribute_roots")
        except ValueError as e:
            raise ValueError(f"{cls}: {e}") from None
        self.sync_statistics, self.process_group, self.distribute_roots = sync_statistics, process_group, distribute_roots
        self._site_of, self._unwhitenable, self._sites = whitenable(model)
        if not self._site_of:
            hint = f" ({next(iter(self._unwhitenable.values()))})" if self._unwhitenable else ""
            raise ValueError(f"{cls}: the model ({type(model).__name__}) has no layer whose inputs and output gradients "
                             "can be captured (nn.Linear, nn.Conv1d, nn.Conv2d, transformers' Conv1D, or a class "
                             f"declared with isolab.nn.register_linear); {cls} has nothing to whiten here{hint}")
        self.statistics: LayerStatistics | None = None
        self._layouts = weight_layouts(model)
        if params is None:
            super().__init__(model, defaults, adam_defaults, embeddings=embeddings, head=head, others=others,
                             grad_scaler=grad_scaler)
        else:
            if embeddings is not None or not (head is None or (isinstance(head, str) and head == "auto")):
                raise ValueError(f"{cls}: embeddings=/head= route the model's parameters; with explicit params= set "
                                 "groups yourself")
            self._names = {p: n for n, p in model.named_parameters()}
            super().__init__(params, defaults, adam_defaults, grad_scaler=grad_scaler)
        self.model = model
        if not any(g["algorithm"] != "adam" for g in self.param_groups):
            raise ValueError(f"{cls}: no parameter group uses algorithm={self.algorithm!r}")
        if self._sharding is not None and (sync_statistics is False or process_group is not None):
            raise ValueError(
                f"{cls}: under FSDP2 each matrix is whitened by one process, which needs every process's statistics: "
                "they are summed over the parameters' device mesh, so sync_statistics must not be False and "
                f"process_group must be None (got sync_statistics={sync_statistics!r}, process_group={process_group!r})")
        self._hook()

    # -- hooks ------------------------------------------------------------------------------
    def _whitened(self):
        return [p for g in self.param_groups if g["algorithm"] != "adam" and g.get("whiten", True) for p in g["params"]]

    def _hook(self) -> None:
        """Hook every site whose weight a whitening group holds (idempotent), then set the capture
        up for the next step."""
        for p in self._whitened():
            site = self._site_of[p]
            if self.statistics is None:
                self.statistics = LayerStatistics({n: m for n, m in self._sites[site]}, dtype=torch.float32,
                                                  tie_to_grad=True)
            else:
                self.statistics.add(site, [m for _, m in self._sites[site]])
        self._update_capture()

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        if getattr(self, "model", None) is not None:
            self._hook()

    def _dims(self, p) -> tuple[int, int]:
        """``(n, m)``: the layer's input and output sizes for weight ``p``."""
        if self._layouts.get(p) == "in_out":
            return int(p.shape[0]), int(p.shape[1])
        return math.prod(p.shape[1:]), int(p.shape[0])

    def _whiten(self, p, u, st):
        """``P_G u P_X`` in ``p``'s layout (``P_X u P_G`` for an ``(in, out)`` weight), in the roots'
        dtype, shaped like ``p``."""
        if self._layouts.get(p) == "in_out":
            return updates.two_sided(u.to(st["root_x"].dtype), st["root_x"], st["root_g"])
        m = u.reshape(u.shape[0], -1).to(st["root_x"].dtype)
        return updates.two_sided(m, st["root_g"], st["root_x"]).reshape(u.shape)

    def _transform_direction(self, group, p, d, st):
        """The whitened matrix ``d`` (``p``'s layout, the whole matrix) before the elementwise part
        of the step: the identity. A variant of the step (a normalized or polar whitened
        direction) overrides this one method; it runs where the whitening runs (the owner)."""
        return d

    # -- validation -----------------------------------------------------------------------------
    def _validate_common(self, group, gi):
        check_lr(group["lr"])
        check_beta(group["beta_cov"], "beta_cov")
        check_nonneg(group["damping"], "damping")
        check_positive_int(group["stat_interval"], "stat_interval")
        check_positive_int(group["root_interval"], "root_interval")
        check_choice(group["root_method"], "root_method", roots.ROOT_METHODS)
        if group["root_tol"] is not None:
            check_float("root_tol", group["root_tol"], low=0.0, low_open=True)
        check_nonneg_int(group["warmup_steps"], "warmup_steps")
        check_nonneg(group["weight_decay"], "weight_decay")
        check_bool(group["shrinkage"], "shrinkage")
        covariance.check_stat_rows(group.setdefault("stat_rows", None))
        check_dtype(group.setdefault("stats_dtype", torch.float32))
        for p in group["params"]:
            if p not in self._site_of:
                why = self._unwhitenable.get(p)
                raise ValueError(
                    f"{self._name(p, gi)} cannot be whitened: "
                    + (why if why else "it is not the weight of an nn.Linear, nn.Conv1d or nn.Conv2d of the model "
                       "(only those layers' inputs and output gradients are captured by hooks)")
                    + ". Put it in a group with algorithm='adam'.")

    def _reroute(self, split):
        """Routing by model: matrices that cannot be whitened go to the AdamW fallback, with a
        warning naming each and the fix."""
        moved = {n: p for n, p in split["matrix"].items() if p not in self._site_of}
        if moved:
            for n in moved:
                del split["matrix"][n]
            split["vector"].update(moved)
            warnings.warn(
                f"{type(self).__name__}: these weight matrices cannot be whitened and are trained by the AdamW fallback "
                "(algorithm='adam'): " + "; ".join(f"{n} {tuple(p.shape)}: {self._unwhitenable.get(p, 'not captured')}"
                                                   for n, p in moved.items()),
                UserWarning, stacklevel=5)
        return split

    # -- capture control ------------------------------------------------------------------------
    def _update_capture(self, after_step=False):
        """Which rows the next backward keeps: sums only on statistics steps, at most the row limit
        per site, row draws seeded by the step number (a resumed run draws the same rows). After a
        step, remember the ``.grad`` tensors used, so that accumulating onto them without
        ``zero_grad()`` is detected."""
        stats = self.statistics
        if stats is None:
            return
        limits, dtypes, t_next, needed = {}, {}, 1, False
        for group in self.param_groups:
            if group["algorithm"] == "adam" or not group.get("whiten", True):
                continue
            steps = [self.state[p]["step"] for p in group["params"] if "step" in self.state.get(p, {})]
            t = (max(steps) if steps else 0) + 1
            needed = needed or rules.refresh_due(t, group["stat_interval"])
            for p in group["params"]:
                site = self._site_of[p]
                limits[site] = covariance.row_limit(group, *self._dims(p))
                dtypes[site] = group["stats_dtype"]
                t_next = max(t_next, self.state.get(p, {}).get("step", 0) + 1)
        stats.stat_rows, stats.dtypes = limits, dtypes
        stats.sample_seed = t_next
        stats.clear(keep_grad_refs=after_step)
        stats.enabled = needed

    def _after_step(self):
        self._update_capture(after_step=True)

    def _after_load(self):
        self._update_capture()

    def _after_copy(self):
        remove_inert_hooks(self.model)
        self.statistics = None
        self._hook()

    def __getstate__(self):
        state = super().__getstate__()
        state["statistics"] = None
        return state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients and forget captured statistics (they belong to those gradients)."""
        super().zero_grad(set_to_none=set_to_none)
        if self.statistics is not None:
            self.statistics.clear()

    def remove_hooks(self) -> None:
        """Remove the statistics hooks from the model (the optimizer can no longer whiten)."""
        if self.statistics is not None:
            self.statistics.remove()

    close = remove_hooks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove_hooks()
        return False

    # -- step: collect ----------------------------------------------------------------------------
    def _matrix_stage(self, items, scale, mode):
        cls = type(self).__name__
        self._comm = None if self._sharding is not None else active_comm(self.sync_statistics, self.process_group, cls)
        whitened = []
        for it in items:
            it.new["step"] = it.state.get("step", 0) + 1
            if it.group.get("whiten", True):
                whitened.append(it)
            else:
                it.whole = False
        self._collect(whitened, scale, mode)
        for it in whitened:
            it.skip_direction = it.new["step"] <= it.group["warmup_steps"]
        self._pre_all(whitened)
        out = self._run_matrix_stage(items)
        if mode == "skip" and self._sharding is not None:  # an owner's non-finite statistics skip every process
            import torch.distributed as dist

            f = self._skip.to(torch.int32)
            dist.all_reduce(f, op=dist.ReduceOp.MAX, group=self._sharding.group)
            self._skip = f > 0
        return out

    def _collect(self, items, scale, mode):
        """Fill ``item.count`` and, on statistics steps, ``item.stats`` (the sums, on the owner)."""
        if self._sharding is not None:
            sums = self._exchange(items, self._sharding.group, owners=self._owners)
        elif self._comm is not None:
            sums = self._exchange(items, self._comm)
        else:
            sums = self._local_sums(items)
        for it, (xx, gg, rows) in zip(items, sums):
            it.count = rows
            if xx is None:
                continue
            if scale is not None and scale.scale is not None:  # the captured G carries the loss scale
                inv = scale.scale.to(device=gg.device, dtype=torch.float64).reciprocal().to(gg.dtype)
                gg = gg * inv * inv
            if mode == "skip":  # a non-finite sum skips the step on the device; the sums stay usable
                finite = torch.isfinite(xx).all() & torch.isfinite(gg).all()
                self._skip = ~finite if self._skip is None else self._skip | ~finite
                xx, gg = torch.nan_to_num(xx, 0.0, 0.0, 0.0), torch.nan_to_num(gg, 0.0, 0.0, 0.0)
            elif not linalg.all_finite(xx, gg):
                where = " on some rank" if (self._comm is not None or self._sharding is not None) else ""
                raise StepFailed(Failure.NONFINITE_STATISTICS,
                                 f"{type(self).__name__}: non-finite (NaN or Inf) input/output-gradient statistics for "
                                 f"{self._name(it.param, it.gi)} (layer {self._site_of[it.param]!r}){where}; "
                                 f"{UNCHANGED_ANYWHERE if where else UNCHANGED}", it.param)
            it.stats = (xx, gg)

    def _due(self, it) -> bool:
        return rules.refresh_due(it.new["step"], it.group["stat_interval"])

    def _local_sums(self, items):
        cls, stats, out = type(self).__name__, self.statistics, []
        for it in items:
            p, site = it.param, self._site_of[it.param]
            name = self._name(p, it.gi)
            rows = stats.rows(site) if stats is not None and stats.attached else 0
            stale = stats.check_grad(site, p) if rows else None
            if stale:
                raise StepFailed(Failure.STALE_STATISTICS, (
                    f"{cls}: the captured statistics of {name} (layer {site!r}) do not belong to its gradient: {stale}. "
                    "Clear gradients with zero_grad() (optimizer's or model's, set_to_none either way) before the "
                    f"backward whose gradient you step on; {UNCHANGED}"))
            if rows == 0:
                raise StepFailed(Failure.STATISTICS_NOT_COLLECTED, (
                    f"{cls}: {name} has a gradient but no input/output-gradient rows were captured for layer {site!r}. "
                    "Was the forward run in eval mode or under no_grad, were the hooks removed, or is the weight used "
                    "without calling the module (e.g. nn.MultiheadAttention's out_proj)?"))
            if not self._due(it):
                out.append((None, None, rows))
                continue
            s = stats.sums(site)
            if s is None:
                raise StepFailed(Failure.STATISTICS_NOT_COLLECTED, f"{cls}: statistics for layer {site!r} were not "
                                 "collected (LayerStatistics.enabled was switched off by hand?)")
            n, m = self._dims(p)
            if s[0].shape != (n, n) or s[1].shape != (m, m):
                raise StepFailed(Failure.STATISTICS_SHAPE, f"{cls}: statistics of layer {site!r} do not match {name}")
            out.append((s[0], s[1], rows))
        return out

    def _exchange(self, items, comm, owners=None):
        """Every process's statistics summed (``[(XᵀX, GᵀG, b)]``, sums ``None`` off statistics steps
        and, with ``owners`` (FSDP2), on the processes that do not own the weight).

        First one ``all_reduce`` of a small integer table: the rows each process captured, and each
        process's status for every layer (collected? right shape? finite? tied to its gradient?),
        so that a problem on one process becomes the same error on every process before any other
        collective; then the upper triangles of the sums (:mod:`isolab.distributed`)."""
        import torch.distributed as dist

        cls = type(self).__name__
        world, rank = dist.get_world_size(comm), dist.get_rank(comm)
        stats = self.statistics
        attached = stats is not None and stats.attached
        if not items:
            return []
        device = items[0].param.device if dist.get_backend(comm) != "gloo" else torch.device("cpu")
        table = torch.zeros(world + 1, len(items), dtype=torch.int64)  # row 0: rows; row 1 + r: rank r's status
        local = []
        for i, it in enumerate(items):
            p, site = it.param, self._site_of[it.param]
            n, m = self._dims(p)
            rows = stats.rows(site) if attached else 0
            table[0, i] = rows
            zeros = (torch.zeros(n, n, dtype=it.group["stats_dtype"], device=p.device),
                     torch.zeros(m, m, dtype=it.group["stats_dtype"], device=p.device))
            code = Failure.OK
            if rows and stats.check_grad(site, p):
                code = Failure.STALE_STATISTICS
            elif self._due(it):
                s = stats.sums(site) if attached else None
                if s is None:
                    code = Failure.STATISTICS_NOT_COLLECTED if rows > 0 else Failure.OK
                elif s[0].shape != (n, n) or s[1].shape != (m, m):
                    code = Failure.STATISTICS_SHAPE
                elif self._nonfinite_mode(p.device) == "raise" and not linalg.all_finite(s[0], s[1]):
                    code = Failure.NONFINITE_STATISTICS
                else:
                    zeros = (s[0], s[1])
            table[1 + rank, i] = int(code)
            local.append(zeros if self._due(it) else None)
        table = table.to(device)
        dist.all_reduce(table, group=comm)
        table = table.cpu()
        status = table[1:]
        bad = (status != 0).any(0).nonzero()
        if len(bad):
            i = int(bad[0, 0])
            it = items[i]
            ranks = status[:, i].nonzero()[:, 0].tolist()
            code = Failure(int(status[:, i].max()))
            where = f"on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} (of {world})"
            name, site = self._name(it.param, it.gi), self._site_of[it.param]
            text = {
                Failure.STALE_STATISTICS: f"the captured statistics of {name} (layer {site!r}) do not belong to its "
                                          f"gradient {where} (replaced after the backward, or accumulated onto a "
                                          "stepped-on gradient without zero_grad())",
                Failure.NONFINITE_STATISTICS: f"non-finite (NaN or Inf) input/output-gradient statistics for {name} "
                                              f"(layer {site!r}) {where}",
                Failure.STATISTICS_SHAPE: f"statistics of layer {site!r} do not match {name} {where}",
            }.get(code, f"statistics for layer {site!r} were not collected {where} (LayerStatistics.enabled was "
                        "switched off by hand?)")
            raise StepFailed(code, f"{cls}: {text}; {UNCHANGED_ANYWHERE}", it.param)
        for i, it in enumerate(items):
            if int(table[0, i]) == 0:
                raise StepFailed(Failure.STATISTICS_NOT_COLLECTED, (
                    f"{cls}: {self._name(it.param, it.gi)} has a gradient but no input/output-gradient rows were "
                    f"captured for layer {self._site_of[it.param]!r} on any rank. Was the forward run in eval mode or "
                    "under no_grad, or were the hooks removed?"))
        due = [i for i, x in enumerate(local) if x is not None]
        mats = [local[i][0] for i in due] + [local[i][1] for i in due]
        if owners is None:
            reduced = distributed.all_reduce_symmetric(mats, comm) if mats else []
        else:
            whose = [owners[items[i].param] for i in due] * 2
            dtype = items[due[0]].group["stats_dtype"] if due else torch.float32
            reduced = distributed.reduce_symmetric_to_owners(mats, whose, [M.shape[0] for M in mats], comm,
                                                             dtype=dtype, device=device) if mats else []
        out = [(None, None, int(table[0, i])) for i in range(len(items))]
        for j, i in enumerate(due):
            xx, gg = reduced[j], reduced[len(due) + j]
            if xx is not None:
                out[i] = (xx.to(local[i][0].device), gg.to(local[i][1].device) / world**2, int(table[0, i]))
        return out

    # -- step: prepare (owner) ------------------------------------------------------------------
    def _prepare(self, items, jobs):
        """The averages and, when due, the roots of each item (into ``item.new``)."""
        cls = type(self).__name__
        rebuilt = {}
        todo = []
        for it in items:  # lean state: the averages are rebuilt from the stored roots
            st, beta = it.state, it.group["beta_cov"]
            if it.stats is not None and beta > 0 and "cov_x" not in st and "shift_x" in st:
                name = self._name(it.param, it.gi)
                rebuilt[id(it)] = {}
                for side in ("x", "g"):
                    todo.append(MatrixJob(
                        st[f"root_{side}"].shape[0],
                        lambda R=st[f"root_{side}"], lam=st[f"shift_{side}"], n=name, p=it.param: _rebuild(cls, R, lam,
                                                                                                          n, p),
                        lambda C, d=rebuilt[id(it)], s=side: d.__setitem__(s, C), Failure.REBUILD,
                        f"the statistics of {name} rebuilt from its stored roots", dtype=st[f"root_{side}"].dtype,
                        device=st[f"root_{side}"].device))
        jobs(todo)
        todo = []
        for it in items:
            self._plan(it, rebuilt.get(id(it)), todo)
        jobs(todo)
        for it in items:  # lean state: keep the shifts the roots were computed with
            if "root_x" in it.new and getattr(it, "lean_shifts", None) is not None:
                it.new["shift_x"], it.new["shift_g"] = it.lean_shifts

    def _plan(self, it, rebuilt, todo):
        group, st, new, p = it.group, it.state, it.new, it.param
        beta, t = group["beta_cov"], new["step"]
        name = self._name(p, it.gi)
        n, m = self._dims(p)
        seen = covariance.seen_rows(group, it.count, n, m)
        if it.stats is not None:
            xx, gg = it.stats
            old_x, old_g = st.get("cov_x"), st.get("cov_g")
            if old_x is None and rebuilt is not None:
                corr_old = rules.bias_correction(beta, st["stat_step"])
                old_x, old_g = rebuilt["x"] * corr_old, rebuilt["g"] * corr_old
            new.update(covariance.average(xx / it.count, gg / it.count, old_x, old_g, beta, st, seen))
        it.lean_shifts = None
        if t <= group["warmup_steps"] or not ("root_x" not in st or rules.refresh_due(t, group["root_interval"])):
            return
        cx, cg = new.get("cov_x", st.get("cov_x")), new.get("cov_g", st.get("cov_g"))
        if cx is None:
            raise StepFailed(Failure.STATISTICS_NOT_COLLECTED, f"{type(self).__name__}: no statistics yet for {name}",
                             p)
        corr = rules.bias_correction(beta, new.get("stat_step", st.get("stat_step")))
        s2 = new.get("rows_s2", st.get("rows_s2"))
        n_eff = None if s2 is None else corr**2 / s2
        prev = "basis" if group["root_method"] == "eigenbasis" else "root"
        lean = covariance.lean(group)
        shifts = []
        for side, C, d, failure, what in (("x", cx, n, Failure.ROOT_X, "Cov(X)"), ("g", cg, m, Failure.ROOT_G, "Cov(G)")):
            C = C / corr
            damping = covariance.effective_damping(group, n_eff, d, seen)
            shift = covariance.lean_shift(C, damping) if lean else None
            shifts.append(shift)
            todo.append(MatrixJob(
                C.shape[0], lambda C=C, prev=st.get(f"{prev}_{side}"), damping=damping, lean=shift is not None,
                side=side, what=what: self._root(it, C, prev, damping, lean, side, what, name),
                lambda R, side=side: new.__setitem__(f"root_{side}", R), failure, f"{what}^(-1/2) for {name}",
                dtype=C.dtype, device=C.device))
        if lean and None not in shifts:  # both roots positive definite: store only them
            it.lean_shifts = tuple(shifts)

    def _inverse_sqrt(self, C, group, previous, damping, lean):
        """``(root, new basis or None)`` of the bias-corrected average ``C``
        (:func:`isolab.optim.roots.inverse_sqrt`). A variant that whitens in another metric (a
        diagonal one) overrides this; it raises ``ValueError`` when no root can be computed."""
        return roots.inverse_sqrt(C, group, previous, damping, lean)

    def _root(self, it, C, previous, damping, lean, side, what, name):
        try:
            R, basis = self._inverse_sqrt(C, it.group, previous, damping, lean)
        except ValueError as e:
            raise StepFailed(Failure.ROOT_X if side == "x" else Failure.ROOT_G,
                             f"{type(self).__name__}: cannot compute {what}^(-1/2) for {name}: {e}; {UNCHANGED}",
                             it.param) from e
        if basis is not None:  # a renewed eigenbasis, kept by the process that computed it
            it.new[f"basis_{side}"] = basis
        return R

    def _failure_text(self, failure):
        return {Failure.ROOT_X: "cannot compute Cov(X)^(-1/2)", Failure.ROOT_G: "cannot compute Cov(G)^(-1/2)",
                Failure.REBUILD: "cannot rebuild the statistics from the stored roots",
                Failure.NONFINITE_STATISTICS: "non-finite (NaN or Inf) summed statistics",
                Failure.STATISTICS_SHAPE: "the statistics do not match the weight"}.get(failure, "the whitening failed")

    def _matrix_cost(self, p):
        """The two roots (``~(n³ + m³)``, amortized but balanced at full cost) and the two-sided
        product (``nm(n + m)``) of weight ``p``."""
        n, m = self._dims(p)
        return float(n**3 + m**3 + n * m * (n + m))

    # -- step: after ----------------------------------------------------------------------------
    def _after_apply(self, it):
        """Drop what the state need not keep (see the module docstring)."""
        if not it.whole:
            return
        group, st, new = it.group, it.state, it.new
        keep_cov = group["beta_cov"] > 0 or group["stat_interval"] > 1 or group["warmup_steps"] > 0
        keep_root = group["root_interval"] > 1 or group["root_method"] == "newton"  # an eigenbasis is always kept
        if "root_x" in new and covariance.lean(group):
            if "shift_x" in new:
                keep_cov = False
            else:  # a root with a dropped (pseudo-inverse) direction cannot give C back
                st.pop("shift_x", None), st.pop("shift_g", None)
        if not keep_cov:
            st.pop("cov_x", None), st.pop("cov_g", None)
        if not keep_root:
            st.pop("root_x", None), st.pop("root_g", None)

    def _owner_state(self, it):
        """The state the whitening reads on the owner: this step's new entries over the stored ones;
        what ``_transform_direction`` writes goes into the new entries (committed with the step)."""
        return ChainMap(it.new, it.state)


def _rebuild(cls, R, lam, name, param):
    try:
        return linalg.covariance_from_inverse_sqrt(R, lam)
    except ValueError as e:
        raise StepFailed(Failure.REBUILD, f"{cls}: cannot rebuild the statistics of {name} from its stored roots: {e}; "
                                          f"{UNCHANGED}", param) from e
