"""Shared machinery of isolab's optimizers: validation, routing, the Adam fallback.

Every optimizer here is one :class:`torch.optim.Optimizer` whose parameter groups each
carry an ``"algorithm"`` key: the optimizer's own matrix algorithm (``"muon"``,
``"shampoo"``, ``"iso"``, ``"isoadam"``) or ``"adam"``, the fallback for parameters that
are not hidden weight matrices. One object, one ``state_dict``, and learning-rate
schedulers act on every group.

Schedulers act on every group's ``lr`` (a float, or a one-element tensor as ``torch.optim``
accepts). Schedulers that cycle momentum (``OneCycleLR(cycle_momentum=True)``, ``CyclicLR``)
write ``betas[0]`` in every group of IsoAdam, and ``momentum`` in every group of Muon, Iso,
Shampoo and SignSGD; there the AdamW fallback group keeps its own ``betas`` (the ``momentum``
key written into it is not read).

Loading a state dict saved by another optimizer class raises ``ValueError`` saying so (the
groups' ``algorithm`` tags identify the class), instead of failing later with a ``KeyError``.

A ``step`` runs in two phases: *validate* (every gradient finite, every new statistic and
inverse root finite and computable), then *apply*. An error in the first phase leaves
parameters and optimizer state exactly as they were.

Under FSDP2 (parameters that are ``DTensor`` shards, :mod:`isolab.fsdp`) the Adam fallback
runs on each process's own rows, the gradient check is agreed over the mesh (a NaN in one
process's rows raises the same error on every process), and each subclass's matrix step uses
the owner scheme of :mod:`isolab.fsdp`.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real

import torch
from torch import nn
from torch.optim import Optimizer

from .. import fsdp, rules
from .routing import split_parameters, weight_layouts

# --------------------------------------------------------------------------- validation


def check_float(name: str, value, *, low=None, high=None, low_open=False, high_open=False) -> float:
    """Return ``float(value)`` or raise ``ValueError`` naming the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, Real) or isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")
    return v


def check_lr(value, name="lr"):
    """A learning rate ``>= 0``: a real number, or (as ``torch.optim`` accepts) a one-element
    tensor, which is returned as is so that schedulers can ``fill_`` it in place."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} as a Tensor must have one element, got shape {tuple(value.shape)}")
        if value.is_complex() or not value.is_floating_point():
            raise ValueError(f"{name} as a Tensor must be a floating-point tensor, got {value.dtype}")
        check_float(name, float(value), low=0.0)
        return value
    return check_float(name, value, low=0.0)


def as_float(value):
    """A hyperparameter as a Python float (a one-element tensor lr is read once per step)."""
    return float(value) if isinstance(value, torch.Tensor) else value


def check_beta(value, name) -> float:
    """A decay rate in ``[0, 1)``."""
    return check_float(name, value, low=0.0, high=1.0, high_open=True)


def check_betas(value, name="betas") -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (beta1, beta2), got {value!r}")
    return (check_beta(value[0], f"{name}[0]"), check_beta(value[1], f"{name}[1]"))


def check_eps(value, name="eps") -> float:
    return check_float(name, value, low=0.0, low_open=True)


def check_nonneg(value, name) -> float:
    return check_float(name, value, low=0.0)


def check_positive_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_nonneg_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def check_bool(value, name) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_choice(value, name, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_dtype(value, name="stats_dtype") -> torch.dtype:
    if value not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be torch.float32 or torch.float64, got {value!r}")
    return value


#: Hyperparameters of the Adam fallback, validated for every group with algorithm="adam".
ADAM_KEYS = ("lr", "betas", "eps", "weight_decay")


def validate_adam_group(group: dict) -> None:
    check_lr(group["lr"])
    group["betas"] = check_betas(group["betas"])
    check_eps(group["eps"])
    check_nonneg(group["weight_decay"], "weight_decay")


# --------------------------------------------------------------------------- Adam step


def adam_step(param: torch.Tensor, grad: torch.Tensor, state: dict, lr, betas, eps, weight_decay, count_key="step") -> None:
    """One AdamW step, operation for operation as ``torch.optim.Adam``'s single-tensor path.

    ``state`` holds the step count under ``count_key`` (int), ``exp_avg`` and
    ``exp_avg_sq`` (param's dtype, like torch). Weight decay is decoupled:
    ``p ← p·(1 − lr·wd)`` (AdamW). The arithmetic is :func:`isolab.rules.adam_update_`,
    shared with the vectorized engine (where ``lr`` may be a per-lane tensor).
    """
    if "exp_avg" not in state:
        state[count_key] = 0
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    state[count_key] += 1
    # a DTensor (FSDP2) parameter and its moments are updated on this process's rows
    rules.adam_update_(
        fsdp.local(param), fsdp.local(grad), fsdp.local(state["exp_avg"]), fsdp.local(state["exp_avg_sq"]),
        state[count_key], lr, betas, eps, weight_decay,
    )


def adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay,
                           names=("adam_lr", "adam_betas", "adam_eps", "adam_weight_decay")):
    """Validated hyperparameters of the AdamW fallback group. ``names`` are the arguments the
    caller passed (``adam_lr``..., or ``lr``... where IsoAdam's fallback inherits its own),
    so that an error names what the user wrote."""
    check_lr(adam_lr, names[0])
    check_betas(adam_betas, names[1])
    check_eps(adam_eps, names[2])
    check_nonneg(adam_weight_decay, names[3])
    return dict(lr=adam_lr, betas=tuple(adam_betas), eps=adam_eps, weight_decay=adam_weight_decay)



# --------------------------------------------------------------------------- base class


class RoutedOptimizer(Optimizer):
    """Base: a matrix algorithm plus an Adam fallback, with validation before mutation.

    Subclasses set ``algorithm`` (the group tag of their matrix groups), implement
    ``_validate_matrix_group(group)`` and ``_step_matrix_groups(groups)``, and list in
    ``stat_keys`` the state entries that must keep their own dtype (float32 statistics of
    bfloat16 parameters) through ``load_state_dict``.
    """

    algorithm: str = ""
    stat_keys: tuple[str, ...] = ()
    #: former names of group keys, ``{old: new}``: a group passed with an old name is read under
    #: the new one with a ``DeprecationWarning``; a loaded state dict's groups are renamed silently
    renamed_keys: dict[str, str] = {}

    def __init__(
        self,
        params,
        defaults: dict,
        adam_defaults: dict,
        *,
        embeddings=None,
        head="auto",
        others="raise",
        matrix_params=None,
    ):
        self._adam_defaults = dict(adam_defaults)
        if not hasattr(self, "_names"):
            self._names: dict[int, str] = {}
        self.model: nn.Module | None = None
        #: {id(weight): "out_in" | "in_out"} of the routed model's matrices (empty for explicit groups:
        #: torch's "out_in" is assumed)
        self._layouts: dict[int, str] = {}
        if isinstance(params, nn.Module):
            model = params
            self.model = model
            self._layouts = weight_layouts(model)
            split = self._reroute(split_parameters(model, embeddings=embeddings, head=head, others=others))
            for group in split.values():
                for name, p in group.items():
                    self._names[id(p)] = name
            groups = []
            if split["matrix"]:
                groups.append({"params": list(split["matrix"].values()), "algorithm": self.algorithm})
            rest = [p for g in ("embedding", "head", "vector") for p in split[g].values()]
            if rest:
                groups.append({"params": rest, "algorithm": "adam"})
            if not split["matrix"]:
                raise ValueError(
                    f"{type(self).__name__}: the model has no hidden weight matrix to optimize (nn.Linear, "
                    f"convolution or attention weight; parameters found: {sum(len(g) for g in split.values())}); "
                    "a matrix optimizer needs at least one"
                )
            params = groups
        elif embeddings is not None or not (head is None or (isinstance(head, str) and head == "auto")):
            raise ValueError("embeddings= and head= are only meaningful when a model (nn.Module) is passed")
        super().__init__(params, defaults)
        self._steps_taken = 0
        #: the FSDP2 mesh the parameters are sharded over (``None``: plain tensors)
        self._sharding = fsdp.sharding_of([p for g in self.param_groups for p in g["params"]], type(self).__name__)
        self._owners: dict[int, int] = {}
        if self._sharding is not None:
            self._assign_owners()
            # torch.distributed.checkpoint's get/set_optimizer_state_dict initialise an *empty*
            # state by a step on zero gradients, which a hooked optimizer cannot take (no rows were
            # captured); an entry per parameter marks the state as initialised
            for g in self.param_groups:
                for p in g["params"]:
                    self.state[p]
        # max|w| of every parameter at construction: lets a later failure say whether the
        # parameters blew up under this optimizer's steps (read only on the failure path)
        params = [p for g in self.param_groups for p in g["params"]]
        self._start_scale = {id(p): a for p, a in zip(params, self._param_maxima(params)) if a is not None}

    def _reroute(self, split):
        """Hook for subclasses: adjust :func:`split_parameters`' routing (Iso: unwhitenable matrices)."""
        return split

    # -- groups -------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        param_group = dict(param_group)
        for old, new in self.renamed_keys.items():
            if old in param_group:
                if new in param_group and param_group[new] != param_group[old]:
                    raise ValueError(f"{type(self).__name__}: a parameter group sets both {new}={param_group[new]!r} "
                                     f"and its deprecated alias {old}={param_group[old]!r}")
                warnings.warn(f"{type(self).__name__}: the parameter-group key {old!r} is deprecated; it is {new!r}",
                              DeprecationWarning, stacklevel=2)
                param_group[new] = param_group.pop(old)
        algo = param_group.setdefault("algorithm", self.algorithm)
        if algo not in (self.algorithm, "adam"):
            raise ValueError(
                f"{type(self).__name__}: a parameter group's algorithm must be "
                f"{self.algorithm!r} or 'adam', got {algo!r}"
            )
        if algo == "adam":
            for k, v in self._adam_defaults.items():
                param_group.setdefault(k, v)
        gi = len(self.param_groups)
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            for p in group["params"]:
                if p.is_sparse:
                    raise ValueError(f"{self._name(p, gi)}: sparse parameters are not supported")
            if algo == "adam":
                validate_adam_group(group)
            else:
                for p in group["params"]:
                    if p.ndim < 2:
                        raise ValueError(
                            f"{type(self).__name__}: {self._name(p, gi)} has ndim={p.ndim} and was "
                            f"routed to the matrix algorithm {algo!r}, which needs a 2-D weight; "
                            "put 1-D parameters (biases, gains) in a group with algorithm='adam' "
                            "or pass the model to route them automatically"
                        )
                self._validate_matrix_group(group, gi)
        except Exception:
            self.param_groups.pop()
            raise

    def _validate_matrix_group(self, group: dict, gi: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def _out_in(self, p: torch.Tensor) -> tuple[int, int]:
        """``(out, in)`` of the layer whose weight is ``p``, in the layer's orientation (a weight
        stored ``(in, out)`` is read transposed; a kernel as ``(shape[0], -1)``)."""
        if self._layouts.get(id(p)) == "in_out":
            return int(p.shape[1]), int(p.shape[0])
        return int(p.shape[0]), math.prod(p.shape[1:])

    def _name(self, p: torch.Tensor, gi: int | None = None) -> str:
        name = self._names.get(id(p))
        shape = tuple(p.shape)
        if name is not None:
            return f"parameter {name!r} {shape}"
        if gi is None:
            for i, g in enumerate(self.param_groups):
                if any(q is p for q in g["params"]):
                    gi = i
                    break
        where = f" in group {gi}" if gi is not None else ""
        idx = ""
        if gi is not None and gi < len(self.param_groups):
            for j, q in enumerate(self.param_groups[gi]["params"]):
                if q is p:
                    idx = f" #{j}"
        return f"parameter{idx}{where} of shape {shape}"

    # -- sharding (FSDP2) -------------------------------------------------------------
    def _matrix_cost(self, p: torch.Tensor) -> float:
        """The whole-matrix work of ``p`` per step, in multiply-adds (what the owners balance)."""
        out, inp = self._out_in(p)
        return float(out * inp * min(out, inp))

    def _assign_owners(self) -> None:
        """Give every matrix parameter without an owner one (:func:`isolab.fsdp.assign_by_cost`),
        the same on every process: from the shapes and order of the parameter groups only."""
        new = [p for g in self.param_groups if g["algorithm"] != "adam" for p in g["params"]
               if id(p) not in self._owners]
        for p, r in zip(new, fsdp.assign_by_cost([self._matrix_cost(p) for p in new], self._sharding.world)):
            self._owners[id(p)] = r

    def _param_maxima(self, params) -> list[float | None]:
        """``max|w|`` of each parameter (``inf`` where it is not finite, ``None`` where it cannot
        be read); over the whole parameter under FSDP2 (one ``all_reduce``), so that every
        process reports the same numbers."""
        values = []
        for p in params:
            t = fsdp.local(p)
            if p.device.type == "meta":
                values.append(None)
                continue
            a = float(t.detach().abs().max()) if t.numel() else 0.0
            values.append(a if math.isfinite(a) else math.inf)
        if self._sharding is not None and values:
            import torch.distributed as dist

            t = torch.tensor([-1.0 if v is None else v for v in values], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._sharding.group)
            values = [None if v is None else float(x) for v, x in zip(values, t.tolist())]
        return values

    # -- step ---------------------------------------------------------------------
    def _first_nonfinite(self, grads) -> int | None:
        """Index of the first gradient with a NaN or Inf (this process's rows), or ``None``."""
        if not grads:
            return None
        local = [fsdp.local(g) for g in grads]
        total = torch.stack([g.sum(dtype=torch.float32).to(local[0].device) for g in local]).sum()
        if math.isfinite(float(total)):  # one sync: a NaN or Inf anywhere makes the sum non-finite
            return None
        flags = torch.stack([torch.isfinite(g).all().to(local[0].device) for g in local])
        if bool(flags.all()):  # a finite gradient whose sum overflowed
            return None
        return int((~flags).nonzero()[0, 0])

    def _check_grads(self) -> None:
        """Raise ``FloatingPointError`` naming the first parameter with a non-finite grad (under
        FSDP2: the first on any process, the same error on every process)."""
        grads, owners = [], []
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is not None:
                    if p.grad.is_sparse:
                        raise ValueError(f"{self._name(p, gi)}: sparse gradients are not supported")
                    grads.append(p.grad)
                    owners.append((p, gi))
        bad = self._first_nonfinite(grads)
        if self._sharding is not None and grads:
            import torch.distributed as dist

            t = torch.tensor([len(grads) if bad is None else bad], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self._sharding.group)
            bad = None if int(t) == len(grads) else int(t)
        if bad is None:
            return
        p, gi = owners[bad]
        raise FloatingPointError(
            f"{type(self).__name__}: non-finite (NaN or Inf) gradient in {self._name(p, gi)}; "
            "no parameter or optimizer state was changed" + self._diagnose_parameters("gradient")
        )

    def _diagnose_parameters(self, symptom: str) -> str:
        """On the failure path only: say whether the *parameters* had blown up under this
        optimizer's own steps (then the non-finite ``symptom``, the gradient or the captured
        statistics, is their consequence). A divergence shows first as whichever of the two
        the backward pass makes non-finite first, which depends on the machine's rounding,
        so both messages name both."""
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
        steps = self._steps_taken
        if bad is not None:
            return (
                f". The parameters themselves are non-finite ({self._name(*bad)}) after {steps} step(s) of "
                f"{type(self).__name__}: the optimizer's steps diverged and the {symptom} is their consequence "
                f"{both} (lower the learning rate, or raise the damping)"
            )
        start = self._start_scale.get(id(worst_p)) if worst_p is not None else None
        if start is not None and worst > 100 * max(start, 1.0):
            return (
                f". The parameters grew under {type(self).__name__}'s {steps} step(s): max|w| of "
                f"{self._name(worst_p, worst_gi)} is {worst:.3g} (it was {start:.3g} when the optimizer was "
                f"created): the optimizer's steps diverged, not the data {both} (lower the learning rate, or raise "
                "the damping)"
            )
        return ""

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimization step.

        Args:
            closure: optional callable that re-evaluates the model (forward and
                backward) and returns the loss; it runs with gradients enabled.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_grads()
        matrix_groups = [(gi, g) for gi, g in enumerate(self.param_groups) if g["algorithm"] != "adam"]
        apply_matrix = self._prepare_matrix_groups(matrix_groups)  # validates, mutates nothing
        apply_matrix()
        for group in self.param_groups:
            if group["algorithm"] == "adam":
                for p in group["params"]:
                    if p.grad is not None:
                        adam_step(p, p.grad, self.state[p], as_float(group["lr"]), group["betas"], group["eps"],
                                  group["weight_decay"])
        self._steps_taken = getattr(self, "_steps_taken", 0) + 1
        self._after_step()
        return loss

    def _prepare_matrix_groups(self, groups):  # pragma: no cover
        raise NotImplementedError

    def _after_step(self) -> None:
        pass

    # -- state_dict -----------------------------------------------------------------
    def state_dict(self) -> dict:
        """``torch.optim.Optimizer.state_dict``; under FSDP2 each group also records the world
        size and rank it was saved on (``"sharded_over"``), since the state is per process."""
        sd = super().state_dict()
        if self._sharding is not None:
            for g in sd["param_groups"]:
                g["sharded_over"] = (self._sharding.world, self._sharding.rank)
        return sd

    def _check_sharding_of(self, state_dict) -> None:
        saved = {tuple(g["sharded_over"]) for g in state_dict["param_groups"] if "sharded_over" in g}
        here = None if self._sharding is None else (self._sharding.world, self._sharding.rank)
        cls = type(self).__name__
        if saved and here is None:
            raise ValueError(f"{cls}.load_state_dict: this state dict was saved by rank {next(iter(saved))[1]} of "
                             f"{next(iter(saved))[0]} FSDP2 processes and holds that process's shards only; load it "
                             "there, into the same sharded model")
        if saved and saved != {here}:
            raise ValueError(f"{cls}.load_state_dict: this state dict was saved by rank {next(iter(saved))[1]} of "
                             f"{next(iter(saved))[0]} FSDP2 processes, and this is rank {here[1]} of {here[0]}: "
                             "each rank must load its own file, at the same number of processes")

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict, keeping statistics in their saved dtype (float32/float64).

        ``torch.optim.Optimizer.load_state_dict`` casts every floating state tensor to
        its parameter's dtype, which would round float32 statistics of a bfloat16
        parameter to bfloat16. The entries listed in ``stat_keys`` are restored in their
        saved dtype, on the parameter's device.
        """
        self._check_foreign_state_dict(state_dict)
        self._check_sharding_of(state_dict)
        saved = state_dict.get("state", {})
        kept = {}
        for idx, st in saved.items():
            for k in self.stat_keys:
                v = st.get(k) if isinstance(st, dict) else None
                if isinstance(v, torch.Tensor):
                    kept[(idx, k)] = v
        super().load_state_dict(state_dict)
        for g in self.param_groups:  # keys saved under a former name, and the saving process
            for old, new in self.renamed_keys.items():
                if old in g:
                    g.setdefault(new, g.pop(old))
            g.pop("sharded_over", None)
        for g in self.param_groups:  # hyperparameters added after the state dict was saved
            for k, v in (self.defaults if g["algorithm"] != "adam" else self._adam_defaults).items():
                if k != "params":
                    g.setdefault(k, v)
        if kept:
            params = [p for g in self.param_groups for p in g["params"]]
            saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
            id_map = dict(zip(saved_ids, params))
            for (idx, k), v in kept.items():
                p = id_map[idx]
                self.state[p][k] = v.to(device=p.device, copy=True)
        self._after_load()

    def _check_foreign_state_dict(self, state_dict) -> None:
        """Refuse, with a clear message, a state dict saved by another optimizer class."""
        cls = type(self).__name__
        if not isinstance(state_dict, dict) or "param_groups" not in state_dict or "state" not in state_dict:
            raise ValueError(f"{cls}.load_state_dict: expected a dict with 'state' and 'param_groups' "
                             f"(from {cls}.state_dict()), got {type(state_dict).__name__}")
        for i, g in enumerate(state_dict["param_groups"]):
            algo = g.get("algorithm")
            if algo is None:
                raise ValueError(
                    f"{cls}.load_state_dict: parameter group {i} of this state dict has no 'algorithm' key, so it "
                    f"was not saved by {cls} (a torch.optim optimizer's, or SignSGD's?); load it into the class "
                    "that saved it"
                )
            if algo not in (self.algorithm, "adam"):
                raise ValueError(
                    f"{cls}.load_state_dict: parameter group {i} was saved with algorithm={algo!r}, i.e. by another "
                    f"optimizer class; {cls} groups use {self.algorithm!r} or 'adam'. Load it into the class that saved it"
                )

    def _after_load(self) -> None:
        pass
