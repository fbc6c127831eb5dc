"""Linear layers on the GGUF's own quantized blocks: the target's weights as the file stores them.

The embedded SmolLM2-135M is a GGUF whose linear layers are Q4_1 blocks (32 weights: fp16 d and m, 16 bytes of
nibbles, w = d*q + m) and whose tied embedding / LM head is Q8_0 (fp16 d, 32 int8, w = d*q). transformers
dequantizes them to fp32 at load (540 MB read per pass); this kernel (gguf_blocks.cpp) reads the blocks themselves
(~66 MB for the 210 Q4_1 layers, ~30 MB for the Q8_0 LM head) and multiplies in fp32:

  layout    the file's bytes regrouped at load (`pack`) into panels of 16 output rows, so one input column's 16
            weights are one vector apart: outputs across the vector lanes, each input value broadcast, as a GEMM
            kernel lays them out (the same bytes per weight; the file's own layout would need a horizontal sum
            per output and row)
  weights   exactly the reference dequantization (gguf.quants.dequantize, what transformers loads): d*q is exact in
            fp32, so the kernel's fma(d, q, m) rounds once as the reference's d*q + m does
            (tests/test_gguf_blocks.py checks every layer of the embedded target bit for bit)
  inputs    fp32, not rounded (llama.cpp rounds a layer's input to 8 bits: Q8_1/Q8_K; not here)
  sums      fp32, one accumulator per output, an fma per input column in column order: another order than MKL's
            or oneDNN's, so the outputs differ from the fp32 kernels' by fp32 rounding only (like the plain and
            packed fp32 kernels from each other)

So the "q4" numerical model is the fp32 model of the dequantized checkpoint, computed with another summation
order. Each output is the same sequence of operations whatever other rows share the call and whatever the thread
count (threads split output features, not sums): row-independent by construction, and probed like the others.

The kernel is C++ built with torch.utils.cpp_extension (a C++ compiler and ninja are needed; ~30 s of CPU) by
setup.sh (`python -m eagle_core.model.gguf_blocks`), else at first use, and cached in ~/.cache/eagle-lens/kernels.
Where it cannot be built, `kernel()` says why and the plan keeps the fp32 kernels. It is built with -march=native
and has three paths, chosen at compile time, that give the same bits (the same fma per column, in column order;
tests/test_gguf_blocks.py builds the others and compares):
`kernel().vector_path()` says which one runs

  avx512    AVX-512F: a panel of 16 outputs is one 512-bit vector
  avx2      AVX2 + FMA + F16C without AVX-512 (e.g. AMD Zen 2/3): two 256-bit vectors, smaller register tiles
  scalar    anything else: the same sums one weight at a time (several times slower than fp32)
"""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import torch

Q4_1, Q8_0 = 0, 1                       # the kernel's block types
TYPES = {"Q4_1": Q4_1, "Q8_0": Q8_0}
BLOCK = 32
BLOCK_BYTES = {Q4_1: 20, Q8_0: 34}      # one block of 32 weights in the file
PANEL, GROUP = 16, 4                    # the kernel's panels of output rows, and panels per unit of work
_SOURCE = os.path.join(os.path.dirname(__file__), "gguf_blocks.cpp")

# -fopenmp: at::parallel_for splits the output groups over torch's threads only in a build with OpenMP (without it
# the kernel ran on one thread whatever torch.set_num_threads said); torch's own libgomp serves it at run time
_CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]

_lock = threading.Lock()
_built: dict = {}


def _build_name(extra_cflags=()) -> str:
    """The extension's name: its source and flags, and this CPU's instruction sets (it is built with -march=native)."""
    h = hashlib.sha1(open(_SOURCE, "rb").read() + " ".join(_CFLAGS + list(extra_cflags)).encode())
    h.update(cpu_flags().encode())
    h.update(torch.__version__.encode())
    return "eagle_gguf_blocks_" + h.hexdigest()[:12]


def cpu_flags() -> str:
    """This CPU's instruction-set line (/proc/cpuinfo's flags; "" where there is none): part of a -march=native
    build's name, so that a cache shared by two machines never hands one the other's build."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return ""


def build_directory(name: str | None = None) -> str:
    """Where a build (the native one by default) lives: $EAGLE_LENS_KERNEL_CACHE, else ~/.cache/eagle-lens/kernels
    (XDG_CACHE_HOME honoured)."""
    name = name or _build_name()
    root = os.environ.get("EAGLE_LENS_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "eagle-lens", "kernels")
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def build(variant: str = "", extra_cflags=()):
    """Compile this source (or load its cached build): the native build, or a `variant` with `extra_cflags` (the
    tests' and the benchmark's scalar and AVX2 builds). One builder at a time per build folder, held by an flock
    that the system releases when its holder dies: torch's own lock is a plain file, and a builder killed mid-build
    (a test run stopped, a CI timeout) left it behind, so every later process waited for it forever. Under our lock
    a torch lock file can only be such a leftover, and is removed."""
    name = _build_name(extra_cflags) + (f"_{variant}" if variant else "")
    return load_extension(name, _SOURCE, _CFLAGS + list(extra_cflags), ["-fopenmp"])


def load_extension(name: str, source: str, cflags: list, ldflags: list = ()):
    """torch.utils.cpp_extension.load of `source` into build_directory(name), under the flock `build` describes
    (the C++ layer body's build, layer_body.py, shares it)."""
    import fcntl
    from torch.utils import cpp_extension
    folder = build_directory(name)
    with open(os.path.join(folder, "build.flock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        leftover = os.path.join(folder, "lock")
        if os.path.exists(leftover):
            os.remove(leftover)
        return cpp_extension.load(name=name, sources=[source], extra_cflags=cflags, extra_ldflags=list(ldflags),
                                  build_directory=folder, verbose=False)


def kernel():
    """The built extension (block_linear, block_weights), or None where it cannot be built (`why_unavailable`)."""
    with _lock:
        if "mod" not in _built:
            try:
                _built["mod"] = build()
            except Exception as exc:   # no compiler, no ninja, a build error: the plan keeps fp32
                _built["mod"], _built["why"] = None, f"the GGUF block kernel could not be built ({str(exc)[:200]})"
        return _built["mod"]


def why_unavailable() -> str | None:
    return None if kernel() is not None else _built.get("why")


def pack(raw: np.ndarray, kind: int, in_features: int) -> np.ndarray:
    """The file's blocks [N, in_features/32 * block bytes] regrouped as the kernel reads them: [panels, blocks,
    16 * block bytes], panels of 16 output rows (zero rows pad N to a multiple of 64). A panel block holds the 16
    rows' fp16 scales d (and Q4_1's minimums m), then per input column the 16 rows' quants side by side (Q4_1: two
    columns per byte, column 2c in the low nibble, 2c + 1 in the high). The same bytes, reordered only."""
    n, nb, size = raw.shape[0], in_features // BLOCK, BLOCK_BYTES[kind]
    if in_features % BLOCK or raw.shape != (n, nb * size):
        raise ValueError(f"blocks of shape {raw.shape} do not hold a [{n}, {in_features}] weight")
    rows = -(-n // (PANEL * GROUP)) * PANEL * GROUP
    b = np.zeros((rows, nb, size), np.uint8)
    b[:n] = raw.reshape(n, nb, size)
    panels = rows // PANEL

    def by_panel(a):                      # [rows, nb, ...] -> [panels, nb, 16 rows, ...]
        return a.reshape(panels, PANEL, nb, *a.shape[2:]).swapaxes(1, 2)
    d = by_panel(b[:, :, 0:2]).reshape(panels, nb, 2 * PANEL)
    if kind == Q4_1:
        m = by_panel(b[:, :, 2:4]).reshape(panels, nb, 2 * PANEL)
        qs = b[:, :, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=2)          # [rows, nb, 32]: the 32 weights' quants in order
        q = by_panel(q).reshape(panels, nb, PANEL, BLOCK // 2, 2)    # [.., row t, pair c, column 2c + h]
        pairs = (q[..., 0] | (q[..., 1] << 4)).swapaxes(2, 3)        # [.., pair c, row t]
        parts = [d, m, pairs.reshape(panels, nb, BLOCK // 2 * PANEL)]
    else:
        q = by_panel(b[:, :, 2:]).swapaxes(2, 3)                    # [.., column k, row t]
        parts = [d, q.reshape(panels, nb, BLOCK * PANEL)]
    return np.ascontiguousarray(np.concatenate(parts, axis=2))


class Blocks:
    """One layer's weights as GGUF blocks: `raw` uint8 [out_features, in_features/32 * block bytes] as the file
    stores them, rows in the layer's own order, kept only as `packed` (the kernel's layout, `pack`); `kind` Q4_1
    or Q8_0."""

    def __init__(self, raw: torch.Tensor, kind: int, in_features: int, source: str):
        self.kind, self.in_features, self.source = kind, in_features, source
        self.out_features = raw.shape[0]
        self.packed = torch.from_numpy(pack(raw.numpy(), kind, in_features))

    @property
    def nbytes(self) -> int:
        return self.out_features * self.in_features // BLOCK * BLOCK_BYTES[self.kind]

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return kernel().block_linear(x, self.packed, self.kind, self.out_features, self.in_features, bias)

    def weights(self) -> torch.Tensor:
        """The weights the kernel computes with, [out, in] fp32 (dequantized by the kernel's own code)."""
        return kernel().block_weights(self.packed, self.kind, self.out_features, self.in_features)


def quantize_q8_0(weight: torch.Tensor, source: str) -> Blocks:
    """Q8_0 blocks of an fp32 weight [out, in] (in a multiple of 32), by llama.cpp's own quantizer as gguf-py
    carries it (gguf.quants: d = max|w| / 127 per block of 32, stored fp16, q = round(w / d)): the draft's "q8"
    kernels (cpu_kernels.py). A row that already is Q8_0 (the GGUF's tied embedding, so the target's LM head)
    quantizes to itself: its largest quant is 127, so d comes back exactly and every q with it."""
    import gguf
    w = weight.detach().to(torch.float32).contiguous().numpy()
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    return Blocks(torch.from_numpy(np.ascontiguousarray(raw)), Q8_0, w.shape[1], source)


def stacked_linear(blocks: list[Blocks], x: torch.Tensor, biases) -> list[torch.Tensor] | None:
    """[b.linear(x, bias) for each layer] as ONE kernel call, for layers that read one input (q/k/v; gate/up): one
    fork of the threads instead of several, and the small k/v products' groups shared out with the rest. The layers'
    panels are stacked once (each layer's `packed` becomes a view of the stack: no byte held twice). Each output is
    the same sequence of operations in either call, so the results are the same bits. None where the layers cannot
    share a call (another kind or input width, or rows not a whole number of 64-row groups)."""
    stack = stacked(blocks)
    if stack is None:
        return None
    b0 = blocks[0]
    y = kernel().block_linear(x, stack[1], b0.kind, stack[2], b0.in_features, None)
    outs = y.split([b.out_features for b in blocks], dim=-1)
    return [o if bias is None else o + bias for o, bias in zip(outs, biases)]


def stacked(blocks: list[Blocks]):
    """(ids, the layers' panels stacked [groups, blocks, bytes], their outputs in all), made once, or None where
    the layers cannot share a call (stacked_linear)."""
    b0 = blocks[0]
    if not all(b.kind == b0.kind and b.in_features == b0.in_features and b.out_features % (PANEL * GROUP) == 0
               for b in blocks):
        return None
    stack = getattr(b0, "_stack", None)
    if stack is None or stack[0] != [id(b) for b in blocks]:
        packed = torch.cat([b.packed for b in blocks])
        offset = 0
        for b in blocks:
            b.packed = packed[offset:offset + b.packed.shape[0]]
            offset += b.packed.shape[0]
        stack = b0._stack = ([id(b) for b in blocks], packed, sum(b.out_features for b in blocks))
    return stack


def read_tensors(path: str) -> tuple[dict, dict]:
    """({tensor name: gguf ReaderTensor} of the file's Q4_1 / Q8_0 tensors, {metadata key: value})."""
    import gguf
    reader = gguf.GGUFReader(path)
    meta = {}
    for key in ("general.architecture",):
        field = reader.fields.get(key)
        if field is not None:
            meta[key] = bytes(field.parts[field.data[0]]).decode()
    return {t.name: t for t in reader.tensors if t.tensor_type.name in TYPES}, meta


def _gguf_names(model, arch: str) -> dict[str, str]:
    """{module name in `model`: GGUF tensor name} for the model's nn.Linear layers, by gguf's own name map."""
    import gguf
    archs = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}
    if arch not in archs:
        return {}
    n_blocks = int(getattr(model.config, "num_hidden_layers", 0))
    tmap = gguf.get_tensor_name_map(archs[arch], n_blocks)
    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            g = tmap.get_name(name)
            if g is not None:
                out[name] = g + ".weight"
    return out


def _llama_row_orders(rows: int, config) -> list[np.ndarray]:
    """Row orders a GGUF tensor may need to match its layer: as stored, and undoing llama.cpp's q/k permutation
    (convert_hf_to_gguf interleaves each head's rotary halves; transformers reverses it at load)."""
    orders = [np.arange(rows)]
    heads = getattr(config, "num_attention_heads", None)
    for n_head in {heads, getattr(config, "num_key_value_heads", None) or heads}:
        if n_head and rows % (2 * n_head) == 0:
            orders.append(np.arange(rows).reshape(n_head, rows // n_head // 2, 2).swapaxes(2, 1).reshape(rows))
    return orders


def attach_blocks(model, path: str) -> dict:
    """Give every nn.Linear of `model` whose weight is a Q4_1 / Q8_0 tensor of the GGUF at `path` its blocks
    (`mod.gguf_blocks`), in the layer's row order, only where the weights the kernel computes with equal the
    layer's own weight bit for bit. Returns {"layers", "bytes", "types" {type: layers}, "unmatched" [names],
    "why" (None, or why no layer has blocks)}."""
    report = {"layers": 0, "bytes": 0, "types": {}, "unmatched": [], "why": None}
    if kernel() is None:
        report["why"] = why_unavailable()
        return report
    tensors, meta = read_tensors(path)
    names = _gguf_names(model, meta.get("general.architecture", ""))
    mods = dict(model.named_modules())
    tied = model.get_output_embeddings()
    for name, mod in mods.items():
        if not isinstance(mod, torch.nn.Linear) or mod.weight.dtype != torch.float32:
            continue
        g = names.get(name)
        if (g is None or g not in tensors) and mod is tied and getattr(model.config, "tie_word_embeddings", False):
            g = "token_embd.weight"           # a tied LM head is the embedding
        t = tensors.get(g)
        blocks = t is not None and _matching_blocks(t, mod, model.config)
        if not blocks:
            report["unmatched"].append(name)
            continue
        mod.gguf_blocks = blocks
        report["layers"] += 1
        report["bytes"] += blocks.nbytes
        report["types"][t.tensor_type.name] = report["types"].get(t.tensor_type.name, 0) + 1
    if not report["layers"]:
        report["why"] = "no linear layer's weight is a Q4_1 / Q8_0 tensor of the GGUF"
    return report


def _matching_blocks(t, mod, config) -> Blocks | None:
    """The tensor's blocks in the row order whose weights equal `mod.weight` exactly, or None."""
    kind = TYPES[t.tensor_type.name]
    data = np.asarray(t.data)
    if data.ndim != 2 or data.shape[0] != mod.out_features or mod.in_features % BLOCK:
        return None
    w = mod.weight.detach()
    for order in _llama_row_orders(data.shape[0], config):
        blocks = Blocks(torch.from_numpy(np.ascontiguousarray(data[order])), kind, mod.in_features, t.name)
        if torch.equal(blocks.weights(), w):
            return blocks
    return None


if __name__ == "__main__":   # setup.sh: build the kernel now, not in the first process that needs it
    mod = kernel()
    print(f"GGUF block kernel: {mod.vector_path()} path, built in {build_directory()}" if mod is not None
          else f"GGUF block kernel: none ({why_unavailable()}); the CPU plan keeps the fp32 kernels")
