"""Shared fixtures: tiny random Llama targets (fast) and heads built to draft badly, well, or perfectly."""
from __future__ import annotations

import os
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)  # tiny models: threads cost more than they give, and CI has 2 cores
# Tiny targets run the fp32 kernels (their numerics must not hang on a timing at load); the tests of the bf16
# numerical model load it explicitly (kernels="bf16"), and the embedded target's tests load kernels="auto", the plan
# users get.
os.environ.setdefault("EAGLE_LENS_CPU_KERNELS", "fp32")

from eagle_core.model.head import EagleHead, head_config_from_target, random_head  # noqa: E402
from eagle_core.model.target import EMBEDDED_GGUF, embedded_gguf_dir, load_target  # noqa: E402


def hf_warped_logprobs(logits, temperature, top_k=0, top_p=1.0) -> torch.Tensor:
    """transformers' plain-sampling warpers, in generate's order: temperature, top-k, top-p; log-probabilities.
    As in generate, top_k = 0 and top_p = 1 add no warper."""
    scores = logits.float().clone()
    scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.log_softmax(scores, dim=-1)


class TinyTokenizer:
    """A stand-in tokenizer over a small vocabulary: token i is the text '<i>'."""

    def __init__(self, vocab_size: int, eos: int | None = None):
        self.vocab_size, self.eos_token_id, self.unk_token_id = vocab_size, eos, None
        self.chat_template = None

    def get_vocab(self):
        return {f"<{i}>": i for i in range(self.vocab_size)}

    def __len__(self):
        return self.vocab_size

    def convert_tokens_to_ids(self, tok):
        return self.get_vocab().get(tok)

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{int(i)}>" for i in ids)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(x) % self.vocab_size for x in text.split()]}


@pytest.fixture(scope="session")
def real_tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(embedded_gguf_dir(), gguf_file=EMBEDDED_GGUF)


def tiny_llama(vocab_size=49152, hidden=64, layers=2, seed=0, **kw) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=kw.pop("max_position_embeddings", 512), tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=kw.pop("eos_token_id", 2), **kw)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_target(real_tokenizer):
    """2-layer random Llama with the real SmolLM2 tokenizer: realistic plumbing, a random head drafts ~nothing."""
    return load_target(model=tiny_llama(), tokenizer=real_tokenizer, device="cpu")


def llama_permute(w, n_head: int, n_head_kv: int):
    """llama.cpp's convert_hf_to_gguf permutation of a q/k weight (each head's rotary halves interleaved)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def quantize_to_gguf(model, path: str) -> str:
    """Write `model`'s linear layers as a llama.cpp-style GGUF (Q4_1 layers, q/k permuted as convert_hf_to_gguf
    does; the tied embedding Q8_0), then give the model the weights transformers would load from it (the
    reference dequantization, q/k permuted back by transformers' own code). Returns `path`: the GGUF of the model
    as it now is, for load_target(gguf_file=...)."""
    import gguf
    import numpy as np
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
    cfg = model.config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    unpermute = LlamaTensorProcessor(config={})._reverse_permute_weights
    writer = gguf.GGUFWriter(path, "llama")
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    layers = [(f"blk.{i}.{g}.weight", layer.get_submodule(h), g) for i, layer in enumerate(model.model.layers)
              for h, g in names.items()]
    layers.append(("token_embd.weight", model.model.embed_tokens, "embd"))
    with torch.no_grad():
        for name, mod, g in layers:
            w = mod.weight.detach().float().numpy()
            n_kv = heads if g == "attn_q" else kv
            if g in ("attn_q", "attn_k"):
                w = llama_permute(w, heads, n_kv)
            qtype = gguf.GGMLQuantizationType.Q8_0 if g == "embd" else gguf.GGMLQuantizationType.Q4_1
            blocks = gguf.quants.quantize(np.ascontiguousarray(w), qtype)
            writer.add_tensor(name, blocks, raw_dtype=qtype)
            deq = gguf.quants.dequantize(blocks, qtype)
            if g in ("attn_q", "attn_k"):
                deq = unpermute(deq, heads, n_kv)
            mod.weight.copy_(torch.from_numpy(np.ascontiguousarray(deq)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def oracle_pair(tokenizer, seed=1, vocab_size=49152, embed_scale=20.0, head_gain=1.0, kernels=None,
                gguf_dir: str | None = None):
    """A target whose next token depends only on the current one, and a head that computes it exactly.

    Target: one Llama layer with its attention output zeroed, so h_j = e_j + MLP(norm(e_j)) and the feature is
    RMSNorm(h_j) with unit weight. Head: fc selects the token embedding, its attention output is zeroed and its
    MLP/norm are the target's, so it outputs h_j: the same logits up to a positive scale, hence the same
    argmax. A shifted head therefore drafts the target's greedy continuation exactly (full-depth acceptance).
    head_gain != 1 scales the embedding the head selects: the same ranking mostly, a sharper or flatter q.
    kernels: the target's CPU kernel plan (cpu_kernels.MODES), e.g. "bf16" for the bf16 numerical model.
    gguf_dir: quantize the target to a Q4_1 GGUF there first (quantize_to_gguf): its weights become the
    dequantized ones, and kernels="q4" runs the GGUF's blocks.
    """
    model = tiny_llama(vocab_size=vocab_size, layers=1, seed=seed, eos_token_id=None if vocab_size < 100 else 2)
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.model.embed_tokens.weight.mul_(embed_scale)   # sharper distributions: fewer near-ties, long runs
    path = quantize_to_gguf(model, os.path.join(gguf_dir, "target.gguf")) if gguf_dir else None
    target = load_target(model=model, tokenizer=tokenizer, device="cpu", kernels=kernels, gguf_file=path)
    head = oracle_head(target, layer, head_gain)
    head.path = "oracle"
    return target, head


def oracle_head(target, layer, head_gain=1.0) -> EagleHead:
    """A shifted head that outputs h_j = g*e_j + MLP(norm(e_j)) of `layer` (a target layer with zeroed attention
    output): fc selects the token embedding (times head_gain), its attention output is zeroed and its MLP/norm
    are the layer's."""
    head = EagleHead(head_config_from_target(target.config, "shifted", bias=True))
    H = target.hidden_size
    with torch.no_grad():
        head.fc.weight.zero_()
        head.fc.weight[:, :H] = torch.eye(H) * head_gain
        head.fc.bias.zero_()
        hl = head.layers[0]
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(hl.self_attn, name).weight.normal_(0, 0.02)
        hl.self_attn.o_proj.weight.zero_()
        hl.mlp.load_state_dict(layer.mlp.state_dict())
        hl.post_attention_layernorm.weight.copy_(layer.input_layernorm.weight)
    return head.eval()


@pytest.fixture(scope="session")
def oracle(real_tokenizer):
    return oracle_pair(real_tokenizer)


def skip_without_bf16():
    """Skip a test of the bf16 numerical model on a CPU that has no bf16 kernel (an AVX2-only AMD EPYC, say):
    there the plan keeps fp32 and that model does not exist (its fp32 tests still run)."""
    from eagle_core.model.cpu_kernels import bf16_kernels_available
    if not bf16_kernels_available():
        pytest.skip("this CPU has no bf16 kernel (oneDNN needs AMX, AVX512-BF16 or AVX-NE-CONVERT); what runs here "
                    "instead, fp32, is tested by test_cpu_kernels.py::"
                    "test_bf16_asked_where_there_is_none_keeps_fp32_and_says_why and every fp32 test")


@pytest.fixture(scope="session")
def oracle_bf16(real_tokenizer):
    """The oracle pair with the target on the bf16 kernels (the numerical model the CPU plan picks with AMX)."""
    skip_without_bf16()
    target, head = oracle_pair(real_tokenizer, kernels="bf16")
    assert target.numerics == "bf16-linear"
    return target, head


@pytest.fixture(scope="session")
def oracle_q4(real_tokenizer, tmp_path_factory):
    """The oracle pair with the target quantized to a Q4_1 GGUF and run on its blocks (the "q4" numerical model)."""
    target, head = oracle_pair(real_tokenizer, kernels="q4", gguf_dir=str(tmp_path_factory.mktemp("q4")))
    assert target.numerics == "gguf-blocks", target.kernel_plan
    return target, head


@pytest.fixture(scope="session")
def tiny_random_head(tiny_target):
    return random_head(tiny_target, "shifted", seed=0)


def tree_vs_steps(target, cache_dtype) -> tuple[list[float], float]:
    """(max |logit difference| between one-token steps over a chain and the same chain's nodes in one tree pass,
    with siblings between them, after a 300-token prefix; the same for a sibling against the chain node beside it,
    which must differ: the check compares the right rows)."""
    from eagle_core.decoding.engine import new_kv_cache, tree_attention_mask
    prompt = [1] + [int(x) for x in torch.randint(3, 40000, (300,), generator=torch.Generator().manual_seed(0))]
    chain = [512, 18, 2048, 7]
    tokens, parents, depth = [chain[0], 333, chain[1], 444, chain[2], chain[3]], [-1, 0, 0, 2, 2, 4], [0, 1, 1, 2, 2, 3]
    anc = torch.zeros(6, 6, dtype=torch.bool)
    for i in range(6):
        j = i
        while j >= 0:
            anc[i, j], j = True, parents[j]
    with torch.inference_mode():
        cache = new_kv_cache(320, cache_dtype)
        target.forward(torch.tensor([prompt]), past_key_values=cache, logits="last")
        steps = [target.forward(torch.tensor([[tok]]), position_ids=torch.tensor([[len(prompt) + i]]),
                                past_key_values=cache)[0][0, -1] for i, tok in enumerate(chain)]
        cache = new_kv_cache(320, cache_dtype)
        target.forward(torch.tensor([prompt]), past_key_values=cache, logits="last")
        n = len(prompt)
        logits, _ = target.forward(torch.tensor([tokens]), position_ids=torch.tensor([[n + d for d in depth]]),
                                   past_key_values=cache,
                                   attention_mask=tree_attention_mask(anc, n, target.dtype, target.device))
    return ([float((logits[0, node] - s).abs().max()) for s, node in zip(steps, (0, 2, 4, 5))],
            float((logits[0, 1] - steps[1]).abs().max()))


# ----------------------------------------------------------------------------- the host's speed
@pytest.fixture(scope="session")
def host_pass_s() -> float:
    """This host's pass in seconds (eagle_core/bench/host_pass.py: transformers' fp32 forward of the embedded target,
    one token over a 256-token cache, best of 20), measured once a session, only when a test asks for it. Timing
    tests state their allowances in these passes, so that one tuned here holds on a host 4x slower (hosts here
    differ ~4x) and still fails on the bug it guards. EAGLE_HOST_PASS_MS=<ms> gives it instead of measuring."""
    given = os.environ.get("EAGLE_HOST_PASS_MS")
    if given:
        return float(given) / 1e3
    from eagle_core.bench.host_pass import host_pass_ms
    s = host_pass_ms() / 1e3
    print(f"\nhost pass: {1e3 * s:.1f} ms")
    return s


# ----------------------------------------------------------------------------- markers (pytest.ini registers them)
# slow / browser / model (the embedded GGUF) / network (a package index or hub) / serial (must not share the
# machine with a parallel worker): each test file carries its own
# (`pytestmark` or a decorator). This table marks, by file or file::test, only what is decided for files that
# carry none of their own yet. `./run_tests.sh` (CI) runs all; `./run_tests.sh -m "not slow and not browser"` is
# the fast loop.
MARKS = {
    "test_app.py": ("slow",),   # whole-app runs through gradio_client (93 s in all)
    # these compare a latency with a cycle measured in the same test: run alone, not beside a parallel worker
    "test_app.py::test_a_step_answers_while_another_session_runs": ("serial",),
    "test_app.py::test_stop_ends_a_run_within_a_cycle": ("serial",),
    "test_app.py::test_stop_while_waiting_for_the_model": ("serial",),
    "test_app.py::test_stop_ends_a_step_waiting_for_the_model": ("serial",),
    "test_app.py::test_waiting_student_sees_the_queue": ("serial",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        file = os.path.basename(str(item.fspath))
        for key in (file, f"{file}::{item.originalname}"):
            for mark in MARKS.get(key, ()):
                item.add_marker(getattr(pytest.mark, mark))
