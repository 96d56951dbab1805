"""Benchmarks (`make bench`). Figures are reported as ratios to a baseline measured in the
same run, since the machines they run on are noisy."""
