"""What Iso costs at scale: flop counts, a cost model, amortization, precision, data parallelism.

Chapter 13 of the book. For one linear layer ``Y = X W`` (``W ∈ R^{n×m}``, ``b`` rows of
``X ∈ R^{b×n}`` and ``G = ∂L/∂Y ∈ R^{b×m}``) one training step costs, counting a
multiply-add as 2 floating-point operations (flops):

============================  =====================================  ==========================
piece                         flops                                  how often
============================  =====================================  ==========================
forward ``XW``                ``2bnm``                               every step
backward ``GWᵀ``, ``XᵀG``     ``4bnm`` (``2bnm`` if ``X`` needs no   every step
                              gradient, e.g. the first layer)
statistics ``XᵀX``, ``GᵀG``   ``2b(n² + m²)``                        every ``stat_interval``
inverse roots (``eigh``)      ``(c_eigh + 2)(n³ + m³)``              every ``root_interval``
inverse roots (Newton)        ``6(n³ + m³)`` per iteration           every ``root_interval``
apply ``P_X ∇W P_G``          ``2nm(n + m)``                         every step
============================  =====================================  ==========================

so the statistics of a square hidden layer cost ``4bn²/6bn² = 2/3`` of its forward and
backward *whatever* ``n`` and ``b`` (about half of that when only the upper triangle of
the symmetric ``XᵀX`` is formed, as ``LayerStatistics`` does on a CPU: :func:`gram_flops`),
while the roots and their application are fixed costs per step that a larger batch dilutes (``(n + m)/(3b)`` for the application).
``c_eigh`` is a model: :data:`EIGH_FLOPS` ``= 9``, the textbook count for a symmetric
eigendecomposition with eigenvectors (Golub & Van Loan), plus ``2n³`` for
``V diag(w) Vᵀ``. Under data parallelism each rank all-reduces ``nm`` gradient entries
per step (what DDP does for any optimizer) and, when the statistics are averaged, the upper
triangles of ``XᵀX`` and ``GᵀG`` (``n(n+1)/2 + m(m+1)/2`` elements, about ``(n² + m²)/2``)
per statistics refresh.

Contents:

- :func:`count_flops`: flops of a call, counted by ``torch.utils.flop_counter`` with
  textbook counts added for the factorizations it does not know (``eigh``, Cholesky).
- :func:`layer_flops`, :func:`iso_step_flops`, :func:`muon_flops`: the cost model above.
- :data:`H100_TFLOPS`, :data:`GPU_PRECISION`, :func:`time_weights`: flops weighted by the
  precision each part runs in on a GPU (float32 statistics, roots and application; bfloat16
  forward, backward and Newton–Schulz); :func:`saved_gpu_timings` reads measured rates from
  ``results/gpu_check.json`` when a GPU run saved them.
- :func:`rank_share`, :func:`model_step`: one process's cost per step with the roots and
  Newton–Schulz spread over the ranks that own them (the explorable of section 13.7).
- :func:`measure_statistics`: one layer's forward, backward and statistics, counted (and
  timed on request).
- :func:`median_time`, :func:`linalg_benchmark`: wall-clock timings (noisy; never printed
  in a checked cell). ``python -m isolab.book.scaling --out results/scaling_gpu.json`` runs the
  benchmark on the best available device and saves it.
- :func:`train_mlp`, :func:`schedule_cost`, :func:`state_elements`, :func:`staleness_run`:
  the amortization experiment (a seeded MLP trained with IsoAdam at given refresh intervals;
  ``scripts/ch13_staleness.py`` and ``scripts/ch13_subsample.py`` run it over seeds).
- :func:`rotated_gaussian`, :func:`whitening_residual`, :func:`newton_inverse_sqrt_in`:
  the precision experiments (bf16 statistics, float32 ``eigh``, Newton in bf16)."""

from ._constants import EIGH_FLOPS, aten  # noqa: F401
from .amortization import RegressionTask, STALENESS_ISOADAM, STALENESS_TASK, _probe_step, mlp, schedule_cost, staleness_run, state_elements, train_mlp  # noqa: F401
from .flops import FlopCount, GRAM_BLOCK, _FACTORIZATIONS, _batch_count, _check_dims, _cholesky_formula, _cholesky_inverse_formula, _eigh_formula, _square_side, count_flops, gram_flops, iso_step_flops, layer_flops, muon_flops  # noqa: F401
from .model import GPU_PRECISION, H100_TFLOPS, model_step, rank_share, saved_gpu_timings, time_weights  # noqa: F401
from .parallel import CommunicationTally, _flat, data_parallel_worker, max_gap, train_replica  # noqa: F401
from .precision import first_root_gain, newton_inverse_sqrt_in, rotated_gaussian, whitening_residual  # noqa: F401
from .timing import _best_device, _sync, linalg_benchmark, measure_statistics, median_time  # noqa: F401

__all__ = ['first_root_gain', 'EIGH_FLOPS', 'GRAM_BLOCK', 'gram_flops', 'FlopCount', 'count_flops', 'layer_flops', 'iso_step_flops', 'muon_flops', 'H100_TFLOPS', 'GPU_PRECISION', 'time_weights', 'rank_share', 'saved_gpu_timings', 'model_step', 'median_time', 'measure_statistics', 'linalg_benchmark', 'mlp', 'RegressionTask', 'train_mlp', 'schedule_cost', 'state_elements', 'STALENESS_TASK', 'STALENESS_ISOADAM', 'staleness_run', 'rotated_gaussian', 'whitening_residual', 'newton_inverse_sqrt_in', 'CommunicationTally', 'train_replica', 'data_parallel_worker', 'max_gap']
