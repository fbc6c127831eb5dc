"""Measuring: the benchmark (run.py: run_bench and the command; prompts.py, methods.py, summary.py, report.py), the
one set of metrics (metrics.py: tau, tokens/s, speedup, accepted-length counts, pure Python) that the benchmark, the
lab and the views use, every prompt set at once (sets.py), tree fitting (tree_fit.py) and machine load
(machine_load.py). `python -m eagle_core.bench ...` runs the benchmark. Importing any of them loads no torch and
leaves os.environ alone."""
