"""The models: the target (any Llama-family causal LM, the embedded GGUF by default), the EAGLE draft head, the
tree-attention kernels and the CPU linear-kernel plan. Nothing here decodes."""
