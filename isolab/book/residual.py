r"""A small residual network in the row convention, and its rotated twin.

The network (rows are samples, as everywhere in the book; torch's ``nn.Linear`` stores
each matrix transposed, ``weight = Wᵀ``)::

    h_0 = x E                                      E ∈ R^{d_in × d}      (input projection)
    h_l = h_{l-1} + f(N(h_{l-1}) A_l + c_l) B_l    A_l ∈ R^{d × k}, B_l ∈ R^{k × d}
    y   = N(h_L) U + u                             U ∈ R^{d × d_out}     (output projection)

``h`` is the *residual stream* (width ``d``); each block reads it through ``A_l`` into
``k`` hidden units, applies the nonlinearity ``f`` *to the hidden units* (never to the
stream), and writes back through ``B_l``. ``N`` is an optional normalization of the
stream: none, RMSNorm ``h / rms(h)`` (no gain by default), or LayerNorm (centring and
scaling, no gain by default).

**Rotating the stream.** For an orthogonal ``Q ∈ R^{d×d}`` the twin has the weights

    E → E Q,   A_l → Qᵀ A_l,   B_l → B_l Q,   U → Qᵀ U,

and stream biases (if any) ``e → e Q``. Its stream is ``h Q`` at every depth, because
``(hQ)(QᵀA) = hA`` and ``f(·) B Q = (f(·) B) Q``, and its output is ``(hQ)(QᵀU) = hU``:
the same function with different weights. With ``N`` = RMSNorm the argument survives,
since ``rms(hQ) = rms(h)`` (``‖hQ‖ = ‖h‖``) gives ``N(hQ) = N(h) Q``. It fails for
LayerNorm, whose centring ``h − mean(h)`` is the projection ``h (I − 11ᵀ/d)``, which does
not commute with ``Q``, and for a per-coordinate gain ``γ``, which is the diagonal matrix
``diag(γ)`` on the stream: its rotation ``Qᵀ diag(γ) Q`` is no longer a gain.
:func:`rotate_stream` applies the recipe; it refuses a gain that is not constant.

**Why training keeps the twins identical (or not).** The map ``θ ↦ θ'`` from the
weights of the network to those of its twin is linear and orthogonal, so the twin's
gradient is the rotated gradient: ``∂L/∂A' = Qᵀ ∂L/∂A`` and so on. An update rule that
commutes with these rotations (SGD, momentum, Muon's ``msign``, Iso's two-sided
whitening) keeps the twin the rotated copy of the original at every step; an elementwise
rule (Adam, sign descent) does not, except for signed permutations ``Q``.
:func:`train_twins` trains both on the same batches in the same order and records the
relative output gap :func:`output_gap` after every step.
"""

from __future__ import annotations

import copy
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn

__all__ = [
    "ResidualBlock",
    "ResidualNet",
    "rotate_stream",
    "random_skew",
    "rotation",
    "signed_permutation",
    "output_gap",
    "regression_data",
    "TwinRun",
    "train_twins",
]

_ACTIVATIONS = {"tanh": torch.tanh, "gelu": nn.functional.gelu, "relu": torch.relu}
_NORMS = (None, "rms", "layer")


def _stream_norm(kind: Optional[str], width: int, gain: bool, dtype) -> Optional[nn.Module]:
    if kind is None:
        return None
    if kind == "rms":
        return nn.RMSNorm(width, elementwise_affine=gain, dtype=dtype)
    return nn.LayerNorm(width, elementwise_affine=gain, bias=False, dtype=dtype)


class ResidualBlock(nn.Module):
    r"""``h ↦ h + f(N(h) A + c) B``: read the stream into ``k`` hidden units, write back.

    ``inp`` holds ``A`` (torch layout ``(k, d)``, bias ``c`` on the hidden units if
    ``hidden_bias``); ``out`` holds ``B`` (layout ``(d, k)``, a bias on the stream only if
    ``stream_bias``).
    """

    def __init__(self, width, hidden, *, activation="tanh", norm=None, norm_gain=False, hidden_bias=True,
                 stream_bias=False, dtype=torch.float64):
        super().__init__()
        self.norm = _stream_norm(norm, width, norm_gain, dtype)
        self.inp = nn.Linear(width, hidden, bias=hidden_bias, dtype=dtype)
        self.out = nn.Linear(hidden, width, bias=stream_bias, dtype=dtype)
        self.activation = activation
        self._f = _ACTIVATIONS[activation]

    def forward(self, h: Tensor) -> Tensor:
        z = self.norm(h) if self.norm is not None else h
        return h + self.out(self._f(self.inp(z)))


class ResidualNet(nn.Module):
    r"""A residual network ``x ↦ y`` with a stream of width ``d`` (see the module docstring).

    Args:
        d_in, width, hidden, d_out: input width, stream width ``d``, hidden units per
            block ``k``, output width.
        depth: number of residual blocks.
        activation: ``"tanh"``, ``"gelu"`` or ``"relu"``, applied to the hidden units.
        norm: ``None``, ``"rms"`` or ``"layer"``: normalization of the stream before each
            block and before the output projection (pre-norm).
        norm_gain: give the norms a learnable per-coordinate gain (initialised to 1).
        hidden_bias: a bias ``c_l`` on each block's hidden units (not on the stream).
        stream_bias: biases that live on the stream (input projection and each ``B_l``).
        output_bias: a bias on the output (not on the stream).
        dtype: parameter dtype (float64 by default: the chapter measures gaps near 1e-15).
        generator: ``torch.Generator`` for the initialisation (``nn.Linear``'s uniform
            rule, drawn in a fixed order), so that a seed fixes the network.
        residual_scale: multiplies every ``B_l`` after initialisation (small values keep
            a deep stream from growing).
    """

    def __init__(self, d_in=8, width=16, hidden=32, d_out=4, depth=3, *, activation="tanh", norm=None,
                 norm_gain=False, hidden_bias=True, stream_bias=False, output_bias=False, dtype=torch.float64,
                 generator: Optional[torch.Generator] = None, residual_scale: float = 0.5):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        if norm not in _NORMS:
            raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
        for name, v in dict(d_in=d_in, width=width, hidden=hidden, d_out=d_out, depth=depth).items():
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "depth" else 1):
                raise ValueError(f"{name} must be a positive int (depth >= 0), got {v!r}")
        self.width = width
        self.embed = nn.Linear(d_in, width, bias=stream_bias, dtype=dtype)
        self.blocks = nn.ModuleList(
            ResidualBlock(width, hidden, activation=activation, norm=norm, norm_gain=norm_gain,
                          hidden_bias=hidden_bias, stream_bias=stream_bias, dtype=dtype)
            for _ in range(depth)
        )
        self.norm = _stream_norm(norm, width, norm_gain, dtype)
        self.head = nn.Linear(width, d_out, bias=output_bias, dtype=dtype)
        self._init(generator, residual_scale)

    @torch.no_grad()
    def _init(self, generator, residual_scale):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                bound = m.in_features ** -0.5  # nn.Linear's default range, drawn from `generator`
                m.weight.uniform_(-bound, bound, generator=generator)
                if m.bias is not None:
                    m.bias.uniform_(-bound, bound, generator=generator)
        for block in self.blocks:
            block.out.weight.mul_(residual_scale)

    def stream(self, x: Tensor) -> list[Tensor]:
        """The residual stream ``[h_0, h_1, ..., h_L]`` for inputs ``x`` (``(..., d_in)``)."""
        h = self.embed(x)
        out = [h]
        for block in self.blocks:
            h = block(h)
            out.append(h)
        return out

    def forward(self, x: Tensor) -> Tensor:
        h = self.stream(x)[-1]
        return self.head(self.norm(h) if self.norm is not None else h)


def _check_orthogonal(Q: Tensor, width: int) -> None:
    if not isinstance(Q, Tensor) or Q.shape != (width, width):
        raise ValueError(f"Q must be a ({width}, {width}) tensor, got {getattr(Q, 'shape', type(Q).__name__)}")
    eye = torch.eye(width, dtype=torch.float64)
    err = (Q.to(torch.float64).mT @ Q.to(torch.float64) - eye).abs().max().item()
    if err > 1e-6:
        raise ValueError(f"Q is not orthogonal: max |QᵀQ − I| = {err:.2e}")


@torch.no_grad()
def rotate_stream(model: ResidualNet, Q: Tensor) -> ResidualNet:
    r"""The twin of ``model`` whose residual stream is rotated by the orthogonal ``Q``.

    Returns a deep copy with ``E → EQ``, ``A_l → QᵀA_l``, ``B_l → B_l Q``, ``U → QᵀU`` and
    stream biases ``e → eQ`` (in torch's ``(out, in)`` layout: ``embed.weight → Qᵀ·``,
    ``inp.weight → ·Q``, ``out.weight → Qᵀ·``, ``head.weight → ·Q``). Hidden-unit and
    output biases are copied unchanged: they do not live on the stream. For ``norm="rms"``
    the twin computes exactly the same function; for ``norm="layer"`` it does not (the
    recipe is applied all the same, so that the difference can be measured).

    Raises:
        ValueError: ``Q`` is not a ``(d, d)`` orthogonal matrix, or a norm has a
            per-coordinate gain that is not constant (``Qᵀ diag(γ) Q`` is not a gain).
    """
    if not isinstance(model, ResidualNet):
        raise TypeError(f"model must be a ResidualNet, got {type(model).__name__}")
    _check_orthogonal(Q, model.width)
    twin = copy.deepcopy(model)
    Q = Q.to(dtype=model.embed.weight.dtype, device=model.embed.weight.device)
    for norm in [b.norm for b in twin.blocks] + [twin.norm]:
        if norm is not None and getattr(norm, "weight", None) is not None:
            g = norm.weight
            if not torch.equal(g, g[:1].expand_as(g)):
                raise ValueError("a norm gain that is not constant cannot be rotated: Qᵀ diag(γ) Q is not diagonal")
    twin.embed.weight.copy_(Q.mT @ twin.embed.weight)
    if twin.embed.bias is not None:
        twin.embed.bias.copy_(twin.embed.bias @ Q)
    for block in twin.blocks:
        block.inp.weight.copy_(block.inp.weight @ Q)
        block.out.weight.copy_(Q.mT @ block.out.weight)
        if block.out.bias is not None:
            block.out.bias.copy_(block.out.bias @ Q)
    twin.head.weight.copy_(twin.head.weight @ Q)
    return twin


def random_skew(n: int, generator: Optional[torch.Generator] = None, dtype=torch.float64) -> Tensor:
    r"""A random skew-symmetric ``K = −Kᵀ`` scaled to spectral norm 1.

    ``expm(θK)`` then turns no plane by more than ``θ`` radians (the eigenvalues of ``K``
    are ``±iω_j`` with ``max ω_j = 1``).
    """
    A = torch.randn(n, n, generator=generator, dtype=dtype)
    K = A - A.mT
    return K / torch.linalg.matrix_norm(K, ord=2)


def rotation(K: Tensor, theta: float) -> Tensor:
    r"""``Q(θ) = expm(θK)`` for skew-symmetric ``K``: orthogonal, ``Q(0) = I``, ``Q(s)Q(t) = Q(s + t)``."""
    if not torch.allclose(K, -K.mT, rtol=0, atol=1e-12 * max(1.0, K.abs().max().item())):
        raise ValueError("K must be skew-symmetric (K = −Kᵀ)")
    return torch.linalg.matrix_exp(theta * K)


def signed_permutation(n: int, generator: Optional[torch.Generator] = None, dtype=torch.float64) -> Tensor:
    r"""A random signed permutation matrix ``P D`` (``D`` diagonal with entries ±1): the
    orthogonal matrices that commute with every elementwise map ``φ`` that is odd
    (``φ(−t) = −φ(t)``), such as the sign and Adam's scaling."""
    perm = torch.randperm(n, generator=generator)
    signs = torch.randint(0, 2, (n,), generator=generator).to(dtype) * 2 - 1
    return torch.eye(n, dtype=dtype)[perm] * signs


@torch.no_grad()
def output_gap(model_a: nn.Module, model_b: nn.Module, x: Tensor) -> float:
    r"""Relative output gap ``‖f_a(x) − f_b(x)‖_F / ‖f_a(x)‖_F`` on the inputs ``x``."""
    ya, yb = model_a(x), model_b(x)
    return ((ya - yb).norm() / ya.norm()).item()


def regression_data(steps: int, batch: int, d_in: int = 8, d_out: int = 4, *, eval_size: int = 256,
                    generator: Optional[torch.Generator] = None, dtype=torch.float64):
    r"""A fixed stream of regression batches and a held-out set.

    Inputs ``x ~ N(0, I)``; targets from a random teacher ``y = tanh(x T₁) T₂`` with
    ``T₁ ∈ R^{d_in×2d_in}``, ``T₂ ∈ R^{2d_in×d_out}`` Gaussian (``T₁`` scaled by
    ``1/√d_in``), so a residual network can fit them but not in one step.

    Returns ``(x, y, x_eval, y_eval)`` with ``x`` of shape ``(steps, batch, d_in)``, ``y``
    of shape ``(steps, batch, d_out)``: batch ``t`` is the one used at step ``t``.
    """
    T1 = torch.randn(d_in, 2 * d_in, generator=generator, dtype=dtype) / d_in**0.5
    T2 = torch.randn(2 * d_in, d_out, generator=generator, dtype=dtype) / (2 * d_in) ** 0.5
    x = torch.randn(steps, batch, d_in, generator=generator, dtype=dtype)
    x_eval = torch.randn(eval_size, d_in, generator=generator, dtype=dtype)
    return x, torch.tanh(x @ T1) @ T2, x_eval, torch.tanh(x_eval @ T1) @ T2


class TwinRun(NamedTuple):
    """Result of :func:`train_twins`, each a float64 tensor of length ``steps + 1`` (index 0: before training)."""

    gap: Tensor  #: relative output gap on the held-out inputs
    loss: Tensor  #: the original network's held-out mean squared error
    loss_twin: Tensor  #: the twin's held-out mean squared error


def train_twins(model: nn.Module, twin: nn.Module, make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
                x: Tensor, y: Tensor, x_eval: Tensor, y_eval: Tensor) -> TwinRun:
    r"""Train ``model`` and ``twin`` on the same batches in the same order; record the gap.

    Each network gets its own optimizer ``make_optimizer(net)`` and is trained in place,
    for ``len(x)`` steps of mean squared error ``mean((net(x_t) − y_t)²)``. After every
    step the relative output gap (:func:`output_gap`) and both held-out losses are
    recorded. A non-finite output (or an optimizer refusing a non-finite gradient with
    ``FloatingPointError``) stops the run: the remaining entries are NaN.
    """
    steps = x.shape[0]
    gap = torch.full((steps + 1,), float("nan"), dtype=torch.float64)
    loss = gap.clone()
    loss_twin = gap.clone()

    @torch.no_grad()
    def record(t):
        ya, yb = model(x_eval), twin(x_eval)
        gap[t] = ((ya - yb).norm() / ya.norm()).item()
        loss[t] = (ya - y_eval).square().mean().item()
        loss_twin[t] = (yb - y_eval).square().mean().item()
        return bool(torch.isfinite(ya).all() and torch.isfinite(yb).all())

    record(0)
    optimizers = [make_optimizer(model), make_optimizer(twin)]
    try:
        for t in range(steps):
            for net, opt in zip((model, twin), optimizers):
                opt.zero_grad()
                (net(x[t]) - y[t]).square().mean().backward()
                opt.step()
            if not record(t + 1):
                break
    except FloatingPointError:  # diverged: isolab's optimizers refuse non-finite gradients
        pass
    finally:
        for opt in optimizers:
            close = getattr(opt, "remove_hooks", None)
            if close is not None:
                close()
    return TwinRun(gap, loss, loss_twin)
