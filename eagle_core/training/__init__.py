"""Training draft heads: ShareGPT data and feature extraction, the training loop, self-generated data.
`python -m eagle_core.training ...` trains (see train.py)."""
