"""EAGLE decoding: draft a tree with the head, verify it in one target pass, accept a prefix by strict speculative
sampling. Imports only eagle_core.model (and torch); no benchmark, lab, training, serving or UI code."""
