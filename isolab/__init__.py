"""isolab: isotropic features and the optimizers they lead to.

The library behind the isolab book. Modules, each with one purpose:

- :mod:`isolab.features`   Gaussian features with a chosen spectrum and rotation.
- :mod:`isolab.feature_step` what a weight update does to a layer's output features.
- :mod:`isolab.explorable` one figure, two lives: live sliders in Jupyter, precomputed
  frames on the static website.
- :mod:`isolab.seeding`    seed every random number generator a chapter touches.
- :mod:`isolab.isotropy`   the book's isotropy measure (effective rank over dimension).
- :mod:`isolab.normalization` BatchNorm, InstanceNorm, LayerNorm, RMSNorm as functions.
- :mod:`isolab.linalg`     matrix functions: msign, inverse roots, whitening, CCA.
- :mod:`isolab.updates`    update rules as pure functions of a layer's ``X`` and ``G``.
- :mod:`isolab.optim`      the ``torch.optim`` optimizers: SignSGD, Muon, Shampoo, Iso, IsoAdam.
- :mod:`isolab.distributed` several processes: a launcher, statistics averaged across
  processes (upper triangles, bucketed), inverse roots computed by their owners and shared.
- :mod:`isolab.noise_dynamics`, :mod:`isolab.invariance`, :mod:`isolab.batch_noise`,
  :mod:`isolab.residual`, :mod:`isolab.first_step`, :mod:`isolab.lm`,
  :mod:`isolab.tensor_iso`, :mod:`isolab.scaling`: the computations behind single
  chapters (5–9, 11, 12, 13).
- :mod:`isolab.rules`      the optimizers' stateful rules (moments, momentum, averages),
  shared by :mod:`isolab.optim` and the engine.
- :mod:`isolab.problems`   seeded training problems of the paper (deep linear regression,
  pure noise, first step of linear regression).
- :mod:`isolab.engine`     whole learning-rate sweeps as one batched computation.
- :mod:`isolab.results`    sweep results: labelled arrays, save/load, standard plots.
"""

__version__ = "0.1.0"
