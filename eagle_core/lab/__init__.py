"""The Paper lab: the papers' findings measured on this model (measure.py). `python -m eagle_core.lab ...`."""
