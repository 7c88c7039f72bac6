"""The book's own code: the computations, problems, sweeps and figures behind its chapters.

A practitioner who trains a model needs none of this; it lives here so that ``isolab``'s
top level holds only the library (:mod:`isolab.optim`, :mod:`isolab.linalg`,
:mod:`isolab.distributed`, :mod:`isolab.nn`, :mod:`isolab.updates`, :mod:`isolab.rules`).

- :mod:`isolab.book.features`, :mod:`isolab.book.feature_step`, :mod:`isolab.book.isotropy`,
  :mod:`isolab.book.normalization`: Part I's features, feature steps, isotropy measure and
  normalization layers as functions.
- :mod:`isolab.book.noise_dynamics`, :mod:`isolab.book.invariance`,
  :mod:`isolab.book.batch_noise`, :mod:`isolab.book.residual`, :mod:`isolab.book.first_step`,
  :mod:`isolab.book.lm`, :mod:`isolab.book.tensor_iso`, :mod:`isolab.book.scaling`: the
  computations behind single chapters (5-9, 11, 12, 13).
- :mod:`isolab.book.problems`: seeded training problems of the paper.
- :mod:`isolab.book.engine`: whole learning-rate sweeps as one batched computation, and the
  tuning protocol of Part III (:mod:`isolab.book.engine.tuning`).
- :mod:`isolab.book.results`: sweep results as labelled arrays, saved and loaded losslessly.
- :mod:`isolab.book.explorable`, :mod:`isolab.book.plotting`, :mod:`isolab.book.figures`:
  one figure with live sliders in Jupyter and precomputed frames on the website; each
  chapter's drawing code; saved results found or fetched.
- :mod:`isolab.book.checks`, :mod:`isolab.book.seeding`: a section's checks printed for
  people; seeding every generator a chapter touches (and, when ``ISOLAB_JITTER`` is set, the
  rounding-sized jitter of every draw, switched on by :func:`isolab.book.seeding.seed_everything`:
  importing the package changes nothing of torch).
"""
