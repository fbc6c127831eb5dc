"""Measuring: the benchmark (run.py), its prompt sets (sets.py), tree fitting, machine load, and the one set of
metrics (metrics.py: tau, tokens/s, accepted-length counts) that the benchmark, the lab and the views use.
`python -m eagle_core.bench ...` runs the benchmark."""
