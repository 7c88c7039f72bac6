"""What isolab's matrix optimizers share: routing, validation, the one step path, the AdamW
fallback, loss scaling, non-finite checks, state dicts and copies.

Every optimizer here is one :class:`torch.optim.Optimizer` whose parameter groups each carry an
``"algorithm"`` key: the optimizer's own matrix algorithm (``"muon"``, ``"shampoo"``, ``"iso"``,
``"isoadam"``) or ``"adam"``, the AdamW fallback for parameters that are not hidden weight
matrices. One object, one ``state_dict``; learning-rate schedulers act on every group (a float
``lr``, or a one-element tensor as ``torch.optim`` accepts). Schedulers that cycle momentum write
``betas[0]`` in IsoAdam's groups and ``momentum`` in the others'; the fallback group keeps its
own ``betas``.

**A step** (:meth:`RoutedOptimizer.step`) runs in two phases: *validate* (the gradients and, for
Iso and IsoAdam, the captured statistics and inverse roots), then *apply*. The matrix part of
each optimizer is four methods, ``_pre`` (elementwise, on this process's rows: momentum),
``_prepare`` (whole-matrix state on the matrix's owner: statistics, roots), ``_direction`` (the
matrix function: ``msign``, the two-sided product) and ``_post`` (elementwise again: Adam's
moments, weight decay, the update); :mod:`isolab.optim._stage` runs them on one process, under
DDP and under FSDP2 alike, so each optimizer's arithmetic is written once.

**Non-finite values** (``nonfinite=``). ``"raise"``: a NaN or Inf in a gradient (or in Iso's
captured statistics) raises ``FloatingPointError`` naming the parameter, with nothing changed;
this reads a flag on the host every step. ``"skip"``: the check stays on the device (no host
synchronisation): a step whose gradients or statistics are not finite leaves every parameter
and every tensor of the optimizer's state as it was, and :attr:`RoutedOptimizer.skipped_steps`
counts such steps (a device tensor; step counters and refresh schedules still advance).
``"auto"`` (default): ``"raise"`` for parameters on the CPU, where reading the flag costs
nothing, ``"skip"`` on accelerators.

**Loss scaling** (``torch.amp.GradScaler``). The optimizers declare
``_step_supports_amp_scaling``: ``scaler.step(opt)`` hands them the scale and the overflow flag
instead of unscaling the gradients itself. They unscale every gradient with torch's own kernel
and remove the scale from what the hooks captured (``G`` carries it: Iso's ``Cov(G)`` would
otherwise be ``s²`` times too large), and skip the step when the scaler found an overflow, as
torch does. So a run with a scaler equals the run without one. If the gradients were already
unscaled (``scaler.unscale_(opt)`` before ``scaler.step``, e.g. to clip them), Iso and IsoAdam
need the scaler itself to read the scale: pass ``grad_scaler=scaler`` when building them.

**Copies.** ``copy.deepcopy(optimizer)``, ``pickle`` and ``torch.save`` work: the copy holds
copies of its parameters (and of the model, for Iso and IsoAdam, whose copy is hooked afresh)
and steps them. A ``(model, optimizer)`` pair copied together stays a pair. The process group,
a ``grad_scaler`` and FSDP2-sharded parameters are not copied (an optimizer over sharded
parameters refuses: save its ``state_dict()`` instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim import Optimizer

from .. import distributed, fsdp
from ._stage import LocalJobs, MatrixItem, SharedJobs, run_stage
from ._validation import check_choice
from .elementwise import NONFINITE, Writer, adam_step_, as_float, first_nonfinite, validate_adam_group
from .failures import UNCHANGED, UNCHANGED_ANYWHERE, Failure, StepFailed
from .routing import split_parameters, weight_layouts

__all__ = ["RoutedOptimizer", "active_comm"]


@dataclass
class _LossScale:
    """What a ``GradScaler`` handed to this step: its overflow flag and the scale the captured
    output gradients carry (``None``: nothing captured needs it)."""

    found_inf: torch.Tensor
    scale: torch.Tensor | None


class RoutedOptimizer(Optimizer):
    """Base: a matrix algorithm plus an AdamW fallback (see the module docstring).

    Subclasses set ``algorithm`` (their groups' tag), implement ``_validate_matrix_group`` and the
    step's four methods, and list in ``stat_keys`` the state entries that keep their own dtype
    (float32 statistics of bfloat16 parameters) through ``load_state_dict``.
    """

    algorithm: str = ""
    stat_keys: tuple[str, ...] = ()
    #: whether captured output gradients must be unscaled too (Iso, IsoAdam)
    _captures_output_gradients = False
    _step_supports_amp_scaling = True
    #: instance attributes a copy keeps (besides torch's ``defaults``, ``state``, ``param_groups``)
    _copied = ("model", "_names", "_layouts", "_adam_defaults", "_steps_taken", "_start_scale", "_skipped")

    def __init__(self, params, defaults: dict, adam_defaults: dict, *, embeddings=None, head="auto",
                 others="raise", grad_scaler=None):
        cls = type(self).__name__
        if grad_scaler is not None and not hasattr(grad_scaler, "_scale"):
            raise ValueError(f"{cls}: grad_scaler must be a torch.amp.GradScaler, got {type(grad_scaler).__name__}")
        self._grad_scaler = grad_scaler
        self._adam_defaults = dict(adam_defaults)
        #: {parameter: its name in the model} (a subclass that knows the model may set it first)
        self._names: dict = self.__dict__.get("_names", {})
        self.model: nn.Module | None = None
        #: {weight: "out_in" | "in_out"} of the model's linear layers (explicit groups: "out_in")
        self._layouts: dict = self.__dict__.get("_layouts", {})
        self._skipped = None
        self._owner_only = False
        self._comm = None  # the DDP process group of the current step (None: no communication)
        self._skip = None  # the current step's device flag (nonfinite="skip")
        defaults = dict(defaults, nonfinite=defaults.get("nonfinite", "auto"))
        if isinstance(params, nn.Module):
            params = self._route(params, embeddings, head, others)
        elif embeddings is not None or not (head is None or (isinstance(head, str) and head == "auto")):
            raise ValueError(f"{cls}: embeddings= and head= are only meaningful when a model (nn.Module) is passed")
        super().__init__(params, defaults)
        self._steps_taken = 0
        #: the FSDP2 mesh the parameters are sharded over (``None``: plain tensors)
        self._sharding = fsdp.sharding_of([p for g in self.param_groups for p in g["params"]], cls)
        self._owners: dict = {}
        if self._sharding is not None:
            self._assign_owners()
            # torch.distributed.checkpoint initialises an *empty* state by a step on zero gradients, which a
            # hooked optimizer cannot take: an entry per parameter marks the state as initialised
            for g in self.param_groups:
                for p in g["params"]:
                    self.state[p]
        # max|w| at construction: a later failure says whether the parameters blew up (read only then)
        params = [p for g in self.param_groups for p in g["params"]]
        self._start_scale = {p: a for p, a in zip(params, self._param_maxima(params)) if a is not None}

    # -- routing --------------------------------------------------------------------------
    def _route(self, model, embeddings, head, others):
        self.model = model
        self._layouts = weight_layouts(model)
        split = self._reroute(split_parameters(model, embeddings=embeddings, head=head, others=others))
        for group in split.values():
            for name, p in group.items():
                self._names[p] = name
        if not split["matrix"]:
            raise ValueError(
                f"{type(self).__name__}: the model has no hidden weight matrix to optimize (nn.Linear, convolution or "
                f"attention weight; parameters found: {sum(len(g) for g in split.values())}); a matrix optimizer needs "
                "at least one"
            )
        groups = [{"params": list(split["matrix"].values()), "algorithm": self.algorithm}]
        rest = [p for g in ("embedding", "head", "vector") for p in split[g].values()]
        if rest:
            groups.append({"params": rest, "algorithm": "adam"})
        return groups

    def _reroute(self, split):
        """Hook for subclasses: adjust :func:`split_parameters`' routing (Iso: unwhitenable matrices)."""
        return split

    # -- groups ---------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        cls = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{cls}: param_group must be a dict, got {type(param_group).__name__}")
        param_group = dict(param_group)
        algo = param_group.setdefault("algorithm", self.algorithm)
        if algo not in (self.algorithm, "adam"):
            raise ValueError(f"{cls}: a parameter group's algorithm must be {self.algorithm!r} or 'adam', got {algo!r}")
        if algo == "adam":
            for k, v in self._adam_defaults.items():
                param_group.setdefault(k, v)
            param_group.setdefault("nonfinite", self.defaults.get("nonfinite", "auto"))
        gi = len(self.param_groups)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            for p in group["params"]:
                if p.is_sparse:
                    raise ValueError(f"{self._name(p, gi)}: sparse parameters are not supported")
            check_choice(group["nonfinite"], "nonfinite", NONFINITE)
            if algo == "adam":
                validate_adam_group(group)
            else:
                for p in group["params"]:
                    if p.ndim < 2:
                        raise ValueError(
                            f"{self._name(p, gi)} has ndim={p.ndim} and was routed to the matrix algorithm {algo!r}, "
                            "which needs a 2-D weight; put 1-D parameters (biases, gains) in a group with "
                            "algorithm='adam' or pass the model to route them automatically"
                        )
                self._validate_matrix_group(group, gi)
            if getattr(self, "_sharding", None) is not None:
                self._assign_owners()
        except Exception as e:
            self.param_groups.pop()
            if isinstance(e, ValueError) and not str(e).startswith(f"{cls}:"):
                raise ValueError(f"{cls}: {e}") from None
            raise

    def _validate_matrix_group(self, group: dict, gi: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def _out_in(self, p: torch.Tensor) -> tuple[int, int]:
        """``(out, in)`` of the layer whose weight is ``p``, in the layer's orientation (a weight
        stored ``(in, out)`` read transposed; a kernel as ``(shape[0], -1)``)."""
        if self._layouts.get(p) == "in_out":
            return int(p.shape[1]), int(p.shape[0])
        return int(p.shape[0]), math.prod(p.shape[1:])

    def _name(self, p: torch.Tensor, gi: int | None = None) -> str:
        name = self._names.get(p)
        shape = tuple(p.shape)
        if name is not None:
            return f"parameter {name!r} {shape}"
        if gi is None:
            gi = next((i for i, g in enumerate(self.param_groups) if any(q is p for q in g["params"])), None)
        where = f" in group {gi}" if gi is not None else ""
        idx = ""
        if gi is not None and gi < len(self.param_groups):
            idx = next((f" #{j}" for j, q in enumerate(self.param_groups[gi]["params"]) if q is p), "")
        return f"parameter{idx}{where} of shape {shape}"

    # -- FSDP2 owners ---------------------------------------------------------------------
    def _matrix_cost(self, p: torch.Tensor) -> float:
        """The whole-matrix work of ``p`` per step, in multiply-adds (what the owners balance)."""
        out, inp = self._out_in(p)
        return float(out * inp * min(out, inp))

    def _assign_owners(self) -> None:
        """Give every matrix parameter without an owner one (:func:`isolab.fsdp.assign_by_cost`),
        the same on every process: from the shapes and order of the parameter groups only."""
        new = [p for g in self.param_groups if g["algorithm"] != "adam" for p in g["params"] if p not in self._owners]
        for p, r in zip(new, fsdp.assign_by_cost([self._matrix_cost(p) for p in new], self._sharding.world)):
            self._owners[p] = r

    def _param_maxima(self, params) -> list[float | None]:
        """``max|w|`` of each parameter (``inf`` if not finite, ``None`` if it cannot be read); over
        the whole parameter under FSDP2 (one ``all_reduce``), the same numbers on every process."""
        values = []
        for p in params:
            t = fsdp.local(p)
            if p.device.type == "meta":
                values.append(None)
                continue
            a = float(t.detach().abs().max()) if t.numel() else 0.0
            values.append(a if math.isfinite(a) else math.inf)
        if getattr(self, "_sharding", None) is not None and values:
            import torch.distributed as dist

            t = torch.tensor([-1.0 if v is None else v for v in values], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._sharding.group)
            values = [None if v is None else float(x) for v, x in zip(values, t.tolist())]
        return values

    # -- checks ---------------------------------------------------------------------------
    def _nonfinite_mode(self, device: torch.device) -> str:
        mode = self.param_groups[0].get("nonfinite", "auto") if self.param_groups else "auto"
        if mode == "auto":
            return "raise" if device.type in ("cpu", "meta") else "skip"
        return mode

    @property
    def skipped_steps(self) -> int:
        """Steps skipped on the device because a gradient or a statistic was not finite
        (``nonfinite="skip"``); reading it synchronises with the device."""
        return 0 if self._skipped is None else int(self._skipped)

    def _grads(self):
        out = []
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise ValueError(f"{type(self).__name__}: {self._name(p, gi)}: sparse gradients are not supported")
                    out.append((p, gi))
        return out

    def _check_grads(self, grads, scale: _LossScale | None):
        """``(mode, skip)``: ``skip`` is ``None`` (go on), ``True`` (the scaler found an overflow:
        skip the step, raise mode) or a device bool (skip mode). Raise mode raises
        ``FloatingPointError`` naming the first parameter with a non-finite gradient (under FSDP2
        the first on any process, the same error everywhere)."""
        tensors = [fsdp.local(p.grad) for p, _ in grads]
        device = tensors[0].device if tensors else torch.device("cpu")
        mode = self._nonfinite_mode(device)
        if mode == "skip":
            flag = torch.zeros((), dtype=torch.bool, device=device)
            if tensors:
                flag = ~torch.stack([torch.isfinite(t).all() for t in tensors]).all()
            if scale is not None:
                flag = flag | (scale.found_inf.to(device) > 0)
            if self._sharding is not None:
                import torch.distributed as dist

                f = flag.to(torch.int32)
                dist.all_reduce(f, op=dist.ReduceOp.MAX, group=self._sharding.group)
                flag = f > 0
            return mode, flag
        if scale is not None and float(scale.found_inf) > 0:
            return mode, True
        bad = first_nonfinite(tensors)
        if self._sharding is not None and tensors:
            import torch.distributed as dist

            t = torch.tensor([len(tensors) if bad is None else bad], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self._sharding.group)
            bad = None if int(t) == len(tensors) else int(t)
        if bad is not None:
            p, gi = grads[bad]
            where = UNCHANGED_ANYWHERE if self._sharding is not None else UNCHANGED
            raise FloatingPointError(f"{type(self).__name__}: non-finite (NaN or Inf) gradient in "
                                     f"{self._name(p, gi)}; {where}" + self._diagnose_parameters("gradient"))
        return mode, None

    def _diagnose_parameters(self, symptom: str) -> str:
        """On the failure path only: whether the *parameters* had blown up under this optimizer's
        own steps (then the non-finite ``symptom`` is their consequence)."""
        if self._owner_only:  # inside an owner's computation no collective may run
            return ""
        both = ("(a divergence shows first as non-finite statistics or as a non-finite gradient, "
                "whichever the backward pass produces first)")
        worst, worst_p, worst_gi, bad = 0.0, None, None, None
        owned = [(p, gi) for gi, group in enumerate(self.param_groups) for p in group["params"]]
        for (p, gi), a in zip(owned, self._param_maxima([p for p, _ in owned])):
            if a is None:
                continue
            if not math.isfinite(a):
                bad = (p, gi)
                break
            if a > worst:
                worst, worst_p, worst_gi = a, p, gi
        cls, steps = type(self).__name__, self._steps_taken
        if bad is not None:
            return (f". The parameters themselves are non-finite ({self._name(*bad)}) after {steps} step(s) of {cls}: "
                    f"the optimizer's steps diverged and the {symptom} is their consequence {both} (lower the learning "
                    "rate, or raise the damping)")
        start = self._start_scale.get(worst_p) if worst_p is not None else None
        if start is not None and worst > 100 * max(start, 1.0):
            return (f". The parameters grew under {cls}'s {steps} step(s): max|w| of {self._name(worst_p, worst_gi)} "
                    f"is {worst:.3g} (it was {start:.3g} when the optimizer was created): the optimizer's steps "
                    f"diverged, not the data {both} (lower the learning rate, or raise the damping)")
        return ""

    # -- loss scaling ---------------------------------------------------------------------
    def _loss_scale(self) -> _LossScale | None:
        """What ``torch.amp.GradScaler.step`` handed over (``found_inf``, ``grad_scale``), with the
        gradients unscaled here (see the module docstring); ``None`` outside a scaler."""
        found = getattr(self, "found_inf", None)
        if found is None:
            return None
        scale = getattr(self, "grad_scale", None)
        if scale is not None:  # the gradients still carry the scale
            inv = scale.double().reciprocal().float()
            by_key: dict = {}
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        g = fsdp.local(p.grad)
                        by_key.setdefault((g.device, g.dtype), []).append(g)
            for (device, _), grads in by_key.items():
                torch._amp_foreach_non_finite_check_and_unscale_(
                    grads, torch.zeros((), device=device), inv.to(device))
        elif self._grad_scaler is not None:
            scale = self._grad_scaler._scale
        elif self._captures_output_gradients:
            raise ValueError(
                f"{type(self).__name__}: the GradScaler unscaled the gradients before step() (scaler.unscale_(optimizer), "
                f"e.g. to clip them), so the scale the captured output gradients carry is unknown here; build the "
                f"optimizer with grad_scaler=scaler; {UNCHANGED}")
        return _LossScale(found, scale)

    # -- the step -------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimization step.

        Args:
            closure: optional callable that re-evaluates the model (forward and backward) and
                returns the loss; it runs with gradients enabled.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scale = self._loss_scale()
        grads = self._grads()
        mode, skip = self._check_grads(grads, scale)
        if skip is True:  # the scaler found an overflow: no step, exactly as torch skips it
            self._after_skipped_step()
            return loss
        self._skip = skip
        items = self._matrix_items()
        try:
            directions = self._matrix_stage(items, scale, mode)
        except StepFailed as e:
            suffix = self._diagnose_parameters("statistics") if e.failure == Failure.NONFINITE_STATISTICS else ""
            raise e.error(suffix) from e.__cause__
        write = Writer(self._skip)
        if self._skip is not None:
            self._skipped = self._skip.to(torch.int64) if self._skipped is None else self._skipped + self._skip
        for it, d in zip(items, directions):
            for k, v in it.new.items():
                it.state[k] = write.value(it.state.get(k), v)
            if not it.skip_direction:
                self._post(it, d, write)
            self._after_apply(it)
        for group in self.param_groups:
            if group["algorithm"] == "adam":
                params = [p for p in group["params"] if p.grad is not None]
                adam_step_(params, [p.grad for p in params], [self.state[p] for p in params], as_float(group["lr"]),
                           group["betas"], group["eps"], group["weight_decay"], write)
        self._steps_taken += 1
        self._after_step()
        return loss

    def _matrix_items(self) -> list[MatrixItem]:
        return [MatrixItem(gi, g, p, self.state[p]) for gi, g in enumerate(self.param_groups)
                if g["algorithm"] != "adam" for p in g["params"] if p.grad is not None]

    def _matrix_stage(self, items, scale, mode):
        """Validate and compute: the directions of ``items`` (this process's rows), nothing changed."""
        self._pre_all(items)
        return self._run_matrix_stage(items)

    def _pre_all(self, items) -> None:
        for it in items:
            it.rows, it.carry = self._pre(it)

    def _run_matrix_stage(self, items):
        return run_stage(self, items, self._jobs())

    def _jobs(self):
        """Where the whole-matrix jobs (roots) run: here, or shared among DDP processes."""
        comm = getattr(self, "_comm", None)
        if comm is not None and getattr(self, "distribute_roots", False) and self._sharding is None:
            return SharedJobs(comm, type(self).__name__)
        return LocalJobs()

    def _pre(self, it: MatrixItem):
        """``(rows, carry)``: this process's rows of the matrix the owner needs, and what
        ``_post`` needs; changes nothing."""
        return fsdp.local(it.param.grad), None

    def _prepare(self, items, jobs) -> None:
        """Whole-matrix state of ``items`` (on their owner) into ``item.new``; changes nothing."""

    def _direction(self, it: MatrixItem) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _post(self, it: MatrixItem, d, write: Writer) -> None:  # pragma: no cover
        raise NotImplementedError

    def _set_rows(self, it: MatrixItem, key: str, rows: torch.Tensor, write: Writer) -> None:
        """``state[key] ← rows`` for an elementwise state entry (this process's rows of a tensor
        shaped like the parameter; masked in skip mode)."""
        st = it.state
        if self._sharding is None:
            st[key] = write.value(st.get(key), rows)
            return
        if key not in st:
            st[key] = torch.zeros_like(it.param, dtype=rows.dtype)
        write(fsdp.local(st[key]), lambda t: t.copy_(rows.reshape(t.shape)))

    def _after_apply(self, it: MatrixItem) -> None:
        pass

    def _after_step(self) -> None:
        pass

    def _after_skipped_step(self) -> None:
        pass

    def _failure_text(self, failure: Failure) -> str:
        """What a failure of the whole-matrix part is, as every process can say it."""
        return {Failure.ROOT_X: "cannot compute the left inverse root", Failure.ROOT_G: "cannot compute the right "
                "inverse root"}.get(failure, "the whole-matrix computation failed")

    # -- state_dict -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``torch.optim.Optimizer.state_dict``; under FSDP2 each group also records the world size
        and rank it was saved on (``"sharded_over"``), since the state is per process."""
        sd = super().state_dict()
        if self._sharding is not None:
            for g in sd["param_groups"]:
                g["sharded_over"] = (self._sharding.world, self._sharding.rank)
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict, keeping statistics in their saved dtype (float32/float64).

        ``torch.optim.Optimizer.load_state_dict`` casts every floating state tensor to its
        parameter's dtype, which would round float32 statistics of a bfloat16 parameter to
        bfloat16; the entries listed in ``stat_keys`` keep their saved dtype.
        """
        self._check_foreign_state_dict(state_dict)
        self._check_sharding_of(state_dict)
        kept = {}
        for idx, st in state_dict.get("state", {}).items():
            for k in self.stat_keys:
                v = st.get(k) if isinstance(st, dict) else None
                if isinstance(v, torch.Tensor):
                    kept[(idx, k)] = v
        super().load_state_dict(state_dict)
        for g in self.param_groups:
            g.pop("sharded_over", None)
            for k, v in (self.defaults if g["algorithm"] != "adam" else
                         dict(self._adam_defaults, nonfinite=self.defaults["nonfinite"])).items():
                if k != "params":  # hyperparameters added after the state dict was saved
                    g.setdefault(k, v)
        if kept:
            params = [p for g in self.param_groups for p in g["params"]]
            id_map = dict(zip([i for g in state_dict["param_groups"] for i in g["params"]], params))
            for (idx, k), v in kept.items():
                p = id_map[idx]
                self.state[p][k] = v.to(device=p.device, copy=True)
        self._after_load()

    def _check_sharding_of(self, state_dict) -> None:
        saved = {tuple(g["sharded_over"]) for g in state_dict["param_groups"] if "sharded_over" in g}
        here = None if self._sharding is None else (self._sharding.world, self._sharding.rank)
        cls = type(self).__name__
        if saved:
            world, rank = next(iter(saved))
            if here is None:
                raise ValueError(f"{cls}.load_state_dict: this state dict was saved by rank {rank} of {world} FSDP2 "
                                 "processes and holds that process's shards only; load it there, into the same sharded "
                                 "model")
            if saved != {here}:
                raise ValueError(f"{cls}.load_state_dict: this state dict was saved by rank {rank} of {world} FSDP2 "
                                 f"processes, and this is rank {here[1]} of {here[0]}: each rank must load its own "
                                 "file, at the same number of processes")

    def _check_foreign_state_dict(self, state_dict) -> None:
        """Refuse, with a clear message, a state dict saved by another optimizer class."""
        cls = type(self).__name__
        if not isinstance(state_dict, dict) or "param_groups" not in state_dict or "state" not in state_dict:
            raise ValueError(f"{cls}.load_state_dict: expected a dict with 'state' and 'param_groups' "
                             f"(from {cls}.state_dict()), got {type(state_dict).__name__}")
        for i, g in enumerate(state_dict["param_groups"]):
            algo = g.get("algorithm")
            if algo is None:
                raise ValueError(f"{cls}.load_state_dict: parameter group {i} of this state dict has no 'algorithm' "
                                 f"key, so it was not saved by {cls} (a torch.optim optimizer's, or SignSGD's?); load "
                                 "it into the class that saved it")
            if algo not in (self.algorithm, "adam"):
                raise ValueError(f"{cls}.load_state_dict: parameter group {i} was saved with algorithm={algo!r}, i.e. "
                                 f"by another optimizer class; {cls} groups use {self.algorithm!r} or 'adam'. Load it "
                                 "into the class that saved it")

    def _after_load(self) -> None:
        pass

    # -- copies ---------------------------------------------------------------------------
    def __getstate__(self):
        if getattr(self, "_sharding", None) is not None:
            raise TypeError(f"{type(self).__name__}: an optimizer over FSDP2-sharded parameters cannot be copied or "
                            "pickled (its state is per process); save its state_dict(), one file per rank")
        state = super().__getstate__()
        for k in self._copied:
            if k in self.__dict__:
                state[k] = self.__dict__[k]
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if "defaults" not in state:  # load_state_dict's refresh of state and groups, not a copy
            return
        self._sharding = None
        self._owners = {}
        self._grad_scaler = None
        self._owner_only = False
        self._comm = self._skip = None
        self.process_group = None
        self._after_copy()

    def _after_copy(self) -> None:
        pass


def active_comm(sync, process_group, who):
    """The DDP process group a step communicates over (``None``: none); see
    :func:`isolab.distributed.active_group`."""
    return distributed.active_group(sync, process_group, who)
