"""isolab: isotropic features and the optimizers they lead to.

The library behind the isolab book. Modules, each with one purpose:

- :mod:`isolab.features`   Gaussian features with a chosen spectrum and rotation.
- :mod:`isolab.feature_step` what a weight update does to a layer's output features.
- :mod:`isolab.explorable` one figure, two lives: live sliders in Jupyter, precomputed
  frames on the static website.
- :mod:`isolab.seeding`    seed every random number generator a chapter touches.
"""

__version__ = "0.1.0"
