r"""The optimizers as vectorized *lane rules*: one update for every lane of a sweep.

Shapes: weights ``W`` and gradients ``g`` are ``(layers, lanes, out, in)`` in torch's
layout (``nn.Linear.weight``, the transpose of the book's row-convention ``W``;
``g = G^T X`` with the loss's ``1/b`` inside ``G``, i.e. exactly ``weight.grad``); the
learning rate is a tensor ``(1, lanes, 1, 1)``.  Every piece of
arithmetic is a call into :mod:`isolab.rules` (stateful rules), :mod:`isolab.updates`
(``two_sided``) or :mod:`isolab.linalg` -- the same functions the ``torch.optim``
optimizers of :mod:`isolab.optim` call, on tensors in the same layout, so that the order
of operations is the optimizer's (Muon's Newton--Schulz, Shampoo's ``L^{-1/4} g R^{-1/4}``
and Iso's ``P_G g P_X`` included).

Hyperparameters and their defaults are the optimizers' (:data:`DEFAULTS`):
``sgd`` = ``torch.optim.SGD``, ``signsgd`` = :class:`isolab.optim.SignSGD`, ``adam`` =
``torch.optim.Adam`` (``torch.optim.AdamW`` with ``weight_decay``), ``muon``,
``shampoo``, ``iso``, ``isoadam`` = :mod:`isolab.optim`'s (Iso and IsoAdam with
``stat_interval=1`` and no warm-up; ``root_method`` ``"eigh"`` or ``"newton"``, the
latter with the batched tracking of :mod:`isolab.book.engine.roots`; Iso's
``momentum_placement`` ``"gradient"`` (momentum before the whitening, the default) or
``"update"`` (after it), as :class:`isolab.optim.Iso`); ``soap`` =
pytorch-optimizer's ``SOAP`` (a reference baseline; :class:`SOAPRule`); ``shampoo_graft``
= Shampoo with Adam grafting as Distributed Shampoo runs it (:class:`GraftedShampooRule`;
:class:`isolab.optim.Shampoo` with ``graft="adam"``); ``kfac`` =
K-FAC with the squared loss's Gauss--Newton factors (:class:`KFACRule`, tested the same way).

Every state tensor has the lane dimension at position 1, so the engine can drop lanes
(diverged or retired) with one ``index_select`` per tensor.

Speed.  The matmul-heavy rules (Muon, Shampoo, Iso, IsoAdam) update the layers in chunks
of about :data:`CHUNK_ENTRIES` entries (:func:`layer_chunks`), each chunk while it is in
cache, and compute the inverse roots of different chunks on several threads
(:func:`parallel_map`) when torch is allowed more than one.  Every matrix gets the same
arithmetic either way: the results are bitwise those of one batch on one thread (tested).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from isolab import linalg, rules, updates
from .defaults import engine_defaults
from .roots import inverse_sqrt_batched

__all__ = ["DEFAULTS", "OPTIMIZERS", "make_rule", "LaneRule"]

#: Each optimizer's hyperparameters and their defaults: the library's, read from the
#: signatures of the classes the lanes reproduce, with the deviations of
#: :data:`isolab.book.engine.defaults.BOOK_DEVIATIONS` (stated there with their reasons).
#: Iso and IsoAdam take the library's ``shrinkage`` and ``stat_rows`` (``"auto"``: every row of
#: batches up to 1024 rows; a row limit below the batch is refused, since the lanes see
#: exactly compressed batches); Shampoo its ``momentum``.  ``shampoo_graft`` is Shampoo with
#: Adam grafting as Distributed Shampoo trains (Shi et al. 2023); ``kfac`` is K-FAC (Martens &
#: Grosse 2015) with Iso's input covariance and the exact Gauss-Newton output factor (damping
#: 0.1: at Iso's 1e-3 it diverges on deep linear networks at every lr tried); ``soap`` takes
#: pytorch-optimizer's SOAP defaults.
DEFAULTS: dict[str, dict] = engine_defaults()

#: Names accepted by :func:`isolab.book.engine.sweep`.
OPTIMIZERS = tuple(DEFAULTS)

#: Entries per operand in one chunk of the matmul-heavy rules (Muon's Newton--Schulz,
#: Shampoo's and Iso's preconditioning and inverse roots): 128 matrices of 32 x 32 in
#: float32 (512 KiB), so that a chunk's operands and temporaries stay in the L2 cache.
#: Measured at Figure 4's size (40 layers x 30 lanes): Newton--Schulz 13 us per matrix in
#: chunks against 21 us in one batch of 1200; eigh-based roots 52 against 61 us.  Every
#: matrix gets exactly the arithmetic it would get in one batch (the tests compare).
CHUNK_ENTRIES = 128 * 32 * 32


def layer_chunks(W: Tensor) -> list:
    """Slices of the layer dimension (dim 0) with about :data:`CHUNK_ENTRIES` entries each."""
    per_layer = W[0].numel()
    step = max(1, CHUNK_ENTRIES // max(per_layer, 1))
    k = W.shape[0]
    return [slice(i, min(i + step, k)) for i in range(0, k, step)]


_POOL: Optional[ThreadPoolExecutor] = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def parallel_map(fn: Callable, items: Sequence) -> list:
    """``[fn(x) for x in items]``, the items spread over ``torch.get_num_threads()`` threads.

    For independent pieces of work that torch would run on one core: a batched
    ``torch.linalg.eigh`` on the CPU solves its matrices one after the other (measured:
    ~42 us per 32 x 32 matrix whatever the thread setting).  The items run on a pool of
    Python threads (torch releases the GIL in its kernels) while torch's own thread count
    is set to 1, so that the workers do not each start a team of OpenMP/MKL threads on the
    same cores (measured on 2 cores: eigh-based roots 28 us per matrix this way, against
    50 us serially and 70-360 us with nested thread teams); the setting is restored after.
    Results are identical to the serial loop.  Serial when torch uses one thread.
    """
    global _POOL, _POOL_SIZE
    threads = torch.get_num_threads()
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE != threads:
            if _POOL is not None:
                _POOL.shutdown(wait=True)
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="isolab-engine")
            _POOL_SIZE = threads
        pool = _POOL
    torch.set_num_threads(1)
    try:
        return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def _add_counts(total: dict, parts) -> None:
    for part in parts:
        for key, v in part.items():
            total[key] = total.get(key, 0) + v


class LaneRule:
    """Base: ``statistics`` (per-step quantities to check for finiteness) then ``apply``."""

    name = ""

    def __init__(self, hyper: dict):
        self.h = hyper
        self.root_stats: dict = {}
        #: the true batch size b (set by the engine): Iso divides ``W.grad`` by it
        self.batch = 1

    def init_state(self, W: Tensor) -> dict:
        return {}

    def check_problem(self, problem) -> None:
        """Raise ``ValueError`` if the rule cannot train ``problem`` (called once by the engine)."""

    def statistics(self, Xs: Tensor, Gs: Tensor, b: int, state: dict) -> dict:
        """Extra per-step tensors (lane dim 1) the update needs, before any lane is dropped
        (the engine drops lanes whose :meth:`statistics_ok` is false); reads ``state``, never
        writes it."""
        return {}

    def statistics_ok(self, stats: dict) -> Optional[Tensor]:
        """``(lanes,)`` bool: the lane's statistics are finite (``None`` when there are none)."""
        ok = None
        for v in stats.values():
            okv = torch.isfinite(v.sum(dim=tuple(d for d in range(v.ndim) if d != 1)))
            ok = okv if ok is None else ok & okv
        return ok

    def apply(self, W: Tensor, g: Tensor, stats: dict, lr: Tensor, t: int, state: dict) -> None:  # pragma: no cover
        raise NotImplementedError


class SGDRule(LaneRule):
    name = "sgd"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        d = rules.heavy_ball_(state.get("buf"), g, W, h["momentum"], h["nesterov"], h["weight_decay"])
        rules.descend_(W, d, lr)


class SignSGDRule(LaneRule):
    name = "signsgd"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        if h["momentum"] > 0:
            g = rules.momentum_(state["buf"], g, h["momentum"], nesterov=False)
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, torch.sign(g), lr)


class AdamRule(LaneRule):
    name = "adam"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        rules.adam_update_(W, g, state["exp_avg"], state["exp_avg_sq"], t, lr, h["betas"], h["eps"], h["weight_decay"])


class MuonRule(LaneRule):
    name = "muon"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        buf = state["buf"]
        # chunk by chunk, each while it is in cache (serially: Newton--Schulz is products,
        # which MKL already spreads over the threads; measured slower through parallel_map)
        for c in layer_chunks(W):
            u = rules.momentum_(buf[c], g[c], h["momentum"], h["nesterov"])
            d = rules.muon_msign(u, steps=h["ns_steps"], exact=h["exact"])
            rules.decoupled_weight_decay_(W[c], lr, h["weight_decay"])
            rules.descend_(W[c], d, lr)


class ShampooRule(LaneRule):
    name = "shampoo"

    def init_state(self, W):
        self.momentum_weight = 0.0
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        chunks = layer_chunks(W)
        mu = h["momentum"]
        if mu > 0:  # as isolab.optim.Shampoo: a bias-corrected average of the preconditioned steps
            self.momentum_weight = mu * self.momentum_weight + (1 - mu)
        first = "L" not in state
        if first:
            state["L"] = g.new_empty(*g.shape[:-1], g.shape[-2])
            state["R"] = g.new_empty(*g.shape[:-2], g.shape[-1], g.shape[-1])
        L, R = state["L"], state["R"]
        for c in chunks:
            gc = g[c]
            L[c] = rules.accumulate(gc @ gc.mT, None if first else L[c], h["beta"])
            R[c] = rules.accumulate(gc.mT @ gc, None if first else R[c], h["beta"])
        if "L_root" not in state or rules.refresh_due(t, h["root_interval"]):
            if "L_root" not in state:
                state["L_root"], state["R_root"] = torch.empty_like(L), torch.empty_like(R)

            def roots(c):
                if L.shape[-1] == R.shape[-1]:
                    rc = linalg.symmetric_inverse_root(torch.stack([L[c], R[c]]), p=4, damping=h["damping"])
                    state["L_root"][c], state["R_root"][c] = rc[0], rc[1]
                else:
                    state["L_root"][c] = linalg.symmetric_inverse_root(L[c], p=4, damping=h["damping"])
                    state["R_root"][c] = linalg.symmetric_inverse_root(R[c], p=4, damping=h["damping"])

            parallel_map(roots, chunks)
            self.root_stats["recomputed"] = self.root_stats.get("recomputed", 0) + 2 * L[..., 0, 0].numel()
        for c in chunks:
            d = updates.two_sided(g[c], state["L_root"][c], state["R_root"][c])
            if mu > 0:
                state["buf"][c].lerp_(d, 1 - mu)
                d = state["buf"][c] / self.momentum_weight
            rules.decoupled_weight_decay_(W[c], lr, h["weight_decay"])
            rules.descend_(W[c], d, lr)


class _WhitenedRule(LaneRule):
    """Iso's statistics: bias-corrected EMA of ``X^T X/b`` and ``G^T G/b``, roots every ``root_interval``.

    ``stat_rows`` as the library's (``None`` or ``"auto"``: every row of the batch when
    ``"auto"``'s limit ``max(1024, 2n)`` reaches the batch; a smaller limit is refused, since a
    compressed batch cannot be subsampled); ``shrinkage`` as the library's
    (:func:`isolab.optim.covariance.effective_damping`: below ``b < n`` rows per step the
    damping is raised to ``max(δ, n/(n + n_eff))``; at ``b >= n`` bitwise the plain rule).
    """

    def check_problem(self, problem) -> None:
        from isolab.optim import covariance

        limit = covariance.row_limit({"stat_rows": self.h["stat_rows"]}, problem.n, problem.n)
        if limit is not None and limit < problem.batch_size:
            raise NotImplementedError(f"{self.name}: stat_rows={self.h['stat_rows']!r} keeps {limit} of the batch's "
                                      f"{problem.batch_size} rows; the engine's compressed batches cannot be "
                                      "subsampled (train such a run with isolab.optim, one lane at a time)")
        self.rows_s2 = 0.0

    def statistics(self, Xs, Gs, b, state):
        """The step's averages ``ema(X^T X / b)``, ``ema(G^T G / b)`` (the new ``cov_x``,
        ``cov_g``, stored by :meth:`apply`), chunk by chunk while each product is in cache."""
        beta = self.h["beta_cov"]
        k, N = Xs.shape[:2]
        out = {}
        for key, M in (("cov_x", Xs), ("cov_g", Gs)):
            m = M.shape[-1]
            C = M.new_empty(k, N, m, m)
            prev = state.get(key)
            chunks = layer_chunks(C)
            tmp = M.new_empty(chunks[0].stop - chunks[0].start, N, m, m)
            for c in chunks:
                batch = tmp[: c.stop - c.start]
                torch.matmul(M[c].mT, M[c], out=batch).div_(b)
                C[c] = rules.ema(batch, None if prev is None else prev[c], beta)
            out[key] = C
        return out

    def statistics_ok(self, stats):
        # The averages are Gram matrices (plus a finite previous average): a NaN or Inf
        # anywhere in X or G, or an overflowing entry (|C_ij| <= sqrt(C_ii C_jj)), shows on
        # the diagonal, so the per-lane trace decides (and not a pass over every entry).
        ok = None
        for v in stats.values():
            okv = torch.isfinite(v.diagonal(dim1=-2, dim2=-1).sum(dim=(0, 2)))
            ok = okv if ok is None else ok & okv
        return ok

    def _roots(self, stats, t, state, chunks):
        h = self.h
        beta = h["beta_cov"]
        state["cov_x"] = cx = stats["cov_x"]  # already averaged by statistics()
        state["cov_g"] = cg = stats["cov_g"]
        # the rows behind the average, as the library counts them (every step: stat_interval = 1)
        self.rows_s2 = beta**2 * getattr(self, "rows_s2", 0.0) + (1 - beta) ** 2 / self.batch
        if "root_x" not in state or rules.refresh_due(t, h["root_interval"]):
            corr = rules.bias_correction(beta, t)
            have_prev = "root_x" in state
            damping = self._damping(cx.shape[-1], cg.shape[-1], corr**2 / self.rows_s2)
            if not have_prev:
                state["root_x"], state["root_g"] = torch.empty_like(cx), torch.empty_like(cg)
            rx, rg = state["root_x"], state["root_g"]

            def roots(c):
                counts = {}
                C = torch.stack([cx[c] / corr, cg[c] / corr])
                prev = torch.stack([rx[c], rg[c]]) if have_prev else None
                R = inverse_sqrt_batched(C, damping, h["root_method"], prev, h["root_tol"], h["root_fallback"],
                                         counts)
                rx[c], rg[c] = R[0], R[1]
                return counts

            _add_counts(self.root_stats, parallel_map(roots, chunks))
        return state["root_x"], state["root_g"]

    def _damping(self, n: int, m: int, n_eff: float) -> float:
        """The relative damping of both roots (the library's effective damping; the engine's
        layers are square, so both sides share it)."""
        from isolab.optim import covariance

        if n != m:  # pragma: no cover - every engine problem has square layers
            raise NotImplementedError("shrinkage with non-square layers: the two sides would need their own damping")
        group = {"damping": self.h["damping"], "shrinkage": self.h["shrinkage"]}
        return covariance.effective_damping(group, n_eff, n, self.batch)


class IsoRule(_WhitenedRule):
    name = "iso"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        chunks = layer_chunks(W)
        root_x, root_g = self._roots(stats, t, state, chunks)
        after = h["momentum_placement"] == "update"  # momentum on the whitened steps
        for c in chunks:
            gc = g[c] / self.batch
            if after:
                gc = updates.two_sided(gc, root_g[c], root_x[c])
            u = rules.momentum_(state["buf"][c], gc, h["momentum"], h["nesterov"]) if h["momentum"] > 0 else gc
            d = u if after else updates.two_sided(u, root_g[c], root_x[c])  # P_G u P_X in torch's layout, as Iso
            rules.decoupled_weight_decay_(W[c], lr, h["weight_decay"])
            rules.descend_(W[c], d, lr)


class IsoAdamRule(_WhitenedRule):
    name = "isoadam"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        chunks = layer_chunks(W)
        root_x, root_g = self._roots(stats, t, state, chunks)
        for c in chunks:
            w = updates.two_sided(g[c] / self.batch, root_g[c], root_x[c])
            rules.adam_update_(W[c], w, state["exp_avg"][c], state["exp_avg_sq"][c], t, lr, h["betas"], h["eps"],
                               h["weight_decay"])


class KFACRule(LaneRule):
    r"""K-FAC (Martens & Grosse 2015) with the exact Gauss--Newton factors of the squared loss.

    For the loss ``||Y - T||^2 / (b n)`` of a deep linear network the Gauss--Newton block
    of layer ``i`` factors as ``A_i \otimes B_i`` with ``A_i = X_i^T X_i / b`` (the input
    covariance, Iso's statistic) and ``B_i = (2/n) P_i^T P_i``, where ``P_i`` is the
    product of the layers after ``i`` (``P_k = I``): the expected outer product of the
    output gradients when targets are drawn from the model, which K-FAC uses in place of the
    gradients of the actual targets (those would shrink with the residual and blow the step
    up). The step is ``B_i^{-1} g A_i^{-1}``: at ``lr = 1``, no damping and no averaging, a
    single layer jumps to the batch's least-squares solution.

    Both factors are exponential averages (``beta_cov``, bias-corrected), damped relatively
    (``damping * tr/n``, as every root in the book; K-FAC needs far more damping than Iso,
    since inverses amplify small eigenvalues twice as much as inverse square roots) and
    inverted every ``root_interval`` steps; exponential-average momentum (as Iso's, optionally Nesterov) on the step, then
    decoupled weight decay. Squared-loss problems only.
    """

    name = "kfac"

    def check_problem(self, problem) -> None:
        if problem.loss_kind != "mse":
            raise ValueError(f"kfac: the Gauss-Newton factors are those of the squared loss; "
                             f"this problem's loss is {problem.loss_kind!r}")
        self.n_out = problem.n

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def statistics(self, Xs, Gs, b, state):
        prev = state.get("cov_x")
        return {"cov_x": rules.ema(Xs.mT @ Xs / b, prev, self.h["beta_cov"])}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        beta = h["beta_cov"]
        k = W.shape[0]
        after = [torch.eye(W.shape[-1], dtype=W.dtype).expand_as(W[0])]  # P_k = I, then P_{k-1}, ...
        for i in range(k - 1, 0, -1):
            after.append(after[-1] @ W[i])
        P = torch.stack(after[::-1])  # P[i] = W[k-1] ... W[i+1] in torch's layout
        B = (2.0 / self.n_out) * (P.mT @ P)
        state["cov_x"] = stats["cov_x"]
        state["B"] = rules.ema(B, state.get("B"), beta)
        if "inv_x" not in state or rules.refresh_due(t, h["root_interval"]):
            corr = rules.bias_correction(beta, t)
            state["inv_x"] = linalg.symmetric_inverse_root(state["cov_x"] / corr, p=1, damping=h["damping"])
            state["inv_g"] = linalg.symmetric_inverse_root(state["B"] / corr, p=1, damping=h["damping"])
            self.root_stats["recomputed"] = self.root_stats.get("recomputed", 0) + 2 * B[..., 0, 0].numel()
        u = updates.two_sided(g, state["inv_g"], state["inv_x"])
        if h["momentum"] > 0:
            u = rules.momentum_(state["buf"], u, h["momentum"], h["nesterov"])
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, u, lr)


class GraftedShampooRule(LaneRule):
    r"""Shampoo with Adam grafting, in the form of Distributed Shampoo (Shi et al. 2023).

    Shampoo supplies the *direction*, Adam the *size*, layer by layer; momentum comes
    after the grafting (Distributed Shampoo grafts the second moment only):

    - factors ``L <- \beta_2 L + (1-\beta_2) g g^T``, ``R <- \beta_2 R + (1-\beta_2) g^T g``
      and Adam's ``v <- \beta_2 v + (1-\beta_2) g^2``, all bias-corrected;
    - ``s = \hat L^{-1/4} g \hat R^{-1/4}`` (roots every ``root_interval`` steps, relative
      ``damping``) and ``a = g / (\sqrt{\hat v} + \epsilon_g)``;
    - the grafted step ``d = s \, \|a\|_F / \|s\|_F``, averaged by momentum
      ``m <- \beta_1 m + (1-\beta_1) d`` (bias-corrected);
    - ``W <- W (1 - lr\,wd) - lr\,\hat m``.

    Unlike :class:`ShampooRule` (Gupta et al. 2018: sums forever, no grafting), an Adam
    learning rate transfers: the step has Adam's size whatever the factors' scale.
    (Distributed Shampoo also offers Nesterov momentum and a delayed start of the
    preconditioning; this lane preconditions from the first step.)
    """

    name = "shampoo_graft"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W),
                "L": W.new_zeros(*W.shape[:-1], W.shape[-2]), "R": W.new_zeros(*W.shape[:-2], W.shape[-1], W.shape[-1])}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        beta1, beta2 = h["betas"]
        L, R, m, v = state["L"], state["R"], state["exp_avg"], state["exp_avg_sq"]
        L.lerp_(g @ g.mT, 1 - beta2)
        R.lerp_(g.mT @ g, 1 - beta2)
        v.lerp_(g.square(), 1 - beta2)
        corr2 = rules.bias_correction(beta2, t)
        if "L_root" not in state or rules.refresh_due(t, h["root_interval"]):
            state["L_root"] = linalg.symmetric_inverse_root(L / corr2, p=4, damping=h["damping"])
            state["R_root"] = linalg.symmetric_inverse_root(R / corr2, p=4, damping=h["damping"])
            self.root_stats["recomputed"] = self.root_stats.get("recomputed", 0) + 2 * L[..., 0, 0].numel()
        direction = updates.two_sided(g, state["L_root"], state["R_root"])
        adam = g / ((v / corr2).sqrt() + h["graft_eps"])
        norms = torch.linalg.matrix_norm(direction, keepdim=True).clamp_min(torch.finfo(g.dtype).tiny)
        grafted = direction * (torch.linalg.matrix_norm(adam, keepdim=True) / norms)
        m.lerp_(grafted, 1 - beta1)
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, m / rules.bias_correction(beta1, t), lr)


class SOAPRule(LaneRule):
    r"""SOAP (Vyas et al. 2024): Adam in the eigenbasis of Shampoo's factors.

    As the reference implementation (pytorch-optimizer's ``SOAP`` on 2-D parameters, no
    dimension merging), step for step:

    - the first call only starts the factors ``L = (1-\beta_s) g g^T``, ``R = (1-\beta_s)
      g^T g`` and their eigenbases ``Q_L``, ``Q_R``; the weights do not move;
    - every later call ``t`` (counting from 2) takes Adam's step in the rotated basis:
      ``m <- lerp(m, g, 1-\beta_1)`` (in the parameter's basis),
      ``v <- lerp(v, (Q_L^T g Q_R)^2, 1-\beta_2)``, and
      ``W <- W - lr \sqrt{1-\beta_2^{t-1}}/(1-\beta_1^{t-1}) Q_L [(Q_L^T m Q_R) / (\sqrt v +
      \epsilon)] Q_R^T``, then ``W <- W (1 - lr\,wd)``;
    - then the factors are averaged with the new gradient (``\beta_s`` = ``shampoo_beta``,
      ``\beta_2`` when ``None``) and, every ``precondition_frequency`` calls, the bases
      are refreshed by one power iteration and a QR decomposition
      (:func:`isolab.rules.soap_refresh_eigenbasis`).
    """

    name = "soap"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W)}

    def _average_factors(self, g, state):
        beta = self.h["shampoo_beta"] if self.h["shampoo_beta"] is not None else self.h["betas"][1]
        if "L" not in state:
            state["L"] = g.new_zeros(*g.shape[:-1], g.shape[-2])
            state["R"] = g.new_zeros(*g.shape[:-2], g.shape[-1], g.shape[-1])
        state["L"].lerp_(g @ g.mT, 1 - beta)
        state["R"].lerp_(g.mT @ g, 1 - beta)

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        if t == 1:
            self._average_factors(g, state)
            state["Q_L"], state["Q_R"] = rules.soap_eigenbasis(state["L"]), rules.soap_eigenbasis(state["R"])
            return
        beta1, beta2 = h["betas"]
        step = t - 1  # the reference's count of updates taken
        size = lr * (rules.bias_correction(beta2, step) ** 0.5 / rules.bias_correction(beta1, step))
        m, v, QL, QR = state["exp_avg"], state["exp_avg_sq"], state["Q_L"], state["Q_R"]
        rotated = rules.soap_rotate(g, QL, QR)
        m.lerp_(g, 1 - beta1)
        v.lerp_(rotated.square(), 1 - beta2)
        direction = rules.soap_unrotate(rules.soap_rotate(m, QL, QR) / v.sqrt().add_(h["eps"]), QL, QR)
        W.sub_(size * direction)
        if h["weight_decay"]:
            W.mul_(1 - h["weight_decay"] * lr)
        self._average_factors(g, state)
        if step % h["precondition_frequency"] == 0:
            state["Q_L"], v = rules.soap_refresh_eigenbasis(state["L"], QL, v, -2)
            state["Q_R"], v = rules.soap_refresh_eigenbasis(state["R"], QR, v, -1)
            state["exp_avg_sq"] = v


_RULES = {r.name: r for r in (SGDRule, SignSGDRule, AdamRule, MuonRule, ShampooRule, IsoRule, IsoAdamRule, SOAPRule,
                                          GraftedShampooRule, KFACRule)}


def _validate(name: str, h: dict) -> None:
    def nonneg(k):
        v = h[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"{name}: {k} must be a real number >= 0, got {v!r}")

    for k in ("weight_decay", "damping", "eps"):
        if k in h:
            nonneg(k)
    for k in ("momentum", "beta_cov"):
        if k in h:
            nonneg(k)
            if not h[k] < 1:
                raise ValueError(f"{name}: {k} must be in [0, 1), got {h[k]!r}")
    if "beta" in h:
        nonneg("beta")
        if h["beta"] > 1:
            raise ValueError(f"{name}: beta must be in [0, 1], got {h['beta']!r}")
    if "betas" in h:
        b = tuple(h["betas"])
        if len(b) != 2 or not all(0 <= x < 1 for x in b):
            raise ValueError(f"{name}: betas must be a pair in [0, 1), got {h['betas']!r}")
        h["betas"] = b
    if "shampoo_beta" in h and h["shampoo_beta"] is not None:
        nonneg("shampoo_beta")
        if not h["shampoo_beta"] < 1:
            raise ValueError(f"{name}: shampoo_beta must be in [0, 1) or None, got {h['shampoo_beta']!r}")
    for k in ("root_interval", "ns_steps", "precondition_frequency"):
        if k in h and (isinstance(h[k], bool) or not isinstance(h[k], int) or h[k] < 1):
            raise ValueError(f"{name}: {k} must be a positive int, got {h[k]!r}")
    if "momentum_placement" in h and h["momentum_placement"] not in ("gradient", "update"):
        raise ValueError(f"{name}: momentum_placement must be 'gradient' or 'update', got {h['momentum_placement']!r}")
    if "shrinkage" in h and not isinstance(h["shrinkage"], bool):
        raise ValueError(f"{name}: shrinkage must be True or False, got {h['shrinkage']!r}")
    if "stat_rows" in h:
        from isolab.optim.covariance import check_stat_rows

        check_stat_rows(h["stat_rows"], f"{name}: stat_rows")
    if "root_method" in h and h["root_method"] not in ("eigh", "newton"):
        raise ValueError(f"{name}: root_method must be 'eigh' or 'newton', got {h['root_method']!r}")
    if "root_fallback" in h and h["root_fallback"] not in ("auto", "eigh", "newton"):
        raise ValueError(f"{name}: root_fallback must be 'auto', 'eigh' or 'newton', got {h['root_fallback']!r}")
    if name == "sgd" and h["nesterov"] and not h["momentum"]:
        raise ValueError("sgd: nesterov=True needs momentum > 0 (as torch.optim.SGD)")


def resolve_hyper(name: str, hyper: Optional[dict] = None) -> dict:
    """The optimizer's defaults updated by ``hyper``; unknown keys raise ``ValueError``."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {OPTIMIZERS}")
    h = dict(DEFAULTS[name])
    for k, v in (hyper or {}).items():
        if k not in h:
            raise ValueError(f"{name}: unknown hyperparameter {k!r}; known: {sorted(h)}")
        h[k] = v
    _validate(name, h)
    return h


def make_rule(name: str, hyper: Optional[dict] = None) -> LaneRule:
    """The lane rule of optimizer ``name`` with hyperparameters ``hyper`` (defaults filled in)."""
    hyper = resolve_hyper(name, hyper)
    return _RULES[name](hyper)
