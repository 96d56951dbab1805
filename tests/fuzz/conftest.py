"""Hypothesis profiles of the fuzz tests (tests/fuzz/).

``ci`` (the default): bounded so the whole folder runs in well under a minute on a 2-core
machine, derandomized so a CI run is reproducible, no example database. ``deep``
(``HYPOTHESIS_PROFILE=deep``): fifty times the examples, random, with the database, for a
long hunt (``pytest tests/fuzz --hypothesis-show-statistics`` prints the inputs tried per
target). Each test asks ``fuzz_settings(n)`` (tests/fuzz/strategies.py) for n examples under
``ci``, scaled by the profile.

The name ``ci`` is Hypothesis's own profile (which it loads when ``CI`` is set): this one
keeps its settings (derandomize, no deadline, no database) and only adds the health checks
big generated inputs trip. It is loaded for the session unless ``HYPOTHESIS_PROFILE`` names
another, so the other Hypothesis tests of a run that collects this folder are derandomized
too.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_BIG_INPUTS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

settings.register_profile("ci", settings.get_profile("ci"), suppress_health_check=_BIG_INPUTS)
settings.register_profile(
    "deep",
    max_examples=5000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[*_BIG_INPUTS, HealthCheck.filter_too_much],
)

# Reproducible unless asked otherwise: a fresh clone without the CI variable would otherwise
# run random examples, and a suite must not pass or fail by the draw.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
