"""Training pipeline: data rendering/masking, pair formation, loss, roll-out metrics, checkpoints, CLI run.

Fast: a tiny random Llama target and a tiny byte-level tokenizer that carries the SmolLM2 chat template.
"""
import json
import os

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from eagle_core.training import data as D
from eagle_core.training import prepare
from eagle_core.training import train as T
from eagle_core.training.evaluate import evaluate, rollout
from eagle_core.training.objective import Frozen, ce_vocabulary, head_loss
from eagle_core.model.head import EagleHead, head_config_from_target, load_head
from eagle_core.model.target import load_target

SMOL_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                 "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


def tiny_tokenizer():
    """Byte-level BPE without merges (256 byte tokens) + ChatML specials, with the SmolLM2 chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = ByteLevel.alphabet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  bos_token="<|im_start|>", additional_special_tokens=specials)
    tok.chat_template = SMOL_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def target(tok):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return load_target(model=LlamaForCausalLM(cfg), tokenizer=tok, device="cpu")


@pytest.fixture(scope="module")
def real_conversation():
    for item in D.iter_sharegpt():
        msgs = D.normalize_conversation(item)
        if msgs is not None and len(msgs) >= 4:
            return msgs
    pytest.skip("no multi-turn ShareGPT conversation")


def random_batch(target, B=4, L=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, target.vocab_size, (B, L), generator=g)
    _, feats = target.forward(ids, logits=False)
    mask = torch.rand(B, L, generator=g) < 0.7
    return ids, feats.to(torch.float16), mask


# ---------------------------------------------------------------------------------------------- data
def test_sharegpt_reader_stops_at_torn_tail(tmp_path):
    p = tmp_path / "torn.json"
    p.write_text('[\n {"id": "a_0", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", '
                 '"value": "hello"}]},\n {"id": "b_0", "conversations": [{"from": "human", "val')
    items = list(D.iter_sharegpt(str(p)))
    assert [i["id"] for i in items] == ["a_0"]
    assert D.normalize_conversation(items[0]) == [{"role": "user", "content": "hi"},
                                                  {"role": "assistant", "content": "hello"}]


def test_mask_covers_exactly_assistant_tokens(tok, real_conversation):
    msgs = real_conversation
    ids, mask = D.render_with_mask(tok, msgs)
    full = tok.apply_chat_template(msgs, tokenize=False)
    assert tok.decode(ids) == full
    masked = tok.decode([i for i, m in zip(ids, mask) if m])
    unmasked = tok.decode([i for i, m in zip(ids, mask) if not m])
    want = "".join(m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant")
    assert masked == want  # every assistant content token and its end-of-turn, nothing else
    for m in msgs:
        if m["role"] == "user":
            assert m["content"] in unmasked  # user turns are never counted
    assert unmasked.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n" in unmasked
    # the template's own tokens are all masked out
    assert unmasked.count("<|im_end|>") == sum(m["role"] != "assistant" for m in msgs) + 1  # + system turn
    # a cut keeps the prefix
    cut = len(ids) // 2
    ids2, mask2 = D.render_with_mask(tok, msgs, max_len=cut)
    assert ids2 == ids[:cut] and mask2 == mask[:cut]


def test_heldout_split_is_disjoint():
    held = D.heldout_ids()
    assert 150 <= len(held) <= 250
    convs = [(cid, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])
             for cid in held[:5] + [D.base_id(held[0]) + "_99", "zzz_0"]]
    train, heldout = D.split_conversations(convs)
    assert [c for c, _ in train] == ["zzz_0"]  # another part of a held-out chat is excluded too
    assert len(heldout) == 5


def test_pairs_shifted_and_unshifted_differ_by_one_position():
    ids = torch.arange(10).view(1, 10)
    feats = torch.randn(1, 10, 8)
    mask = torch.ones(1, 10, dtype=torch.bool)
    fs, ts, ys, ms, ps = D.make_pairs(ids, feats, mask, "shifted")
    fu, tu, yu, mu, pu = D.make_pairs(ids, feats, mask, "unshifted")
    assert torch.equal(fs, fu) and torch.equal(ys, yu) and torch.equal(ms, mu) and torch.equal(ps, pu)
    assert torch.equal(ts[:, :-1], tu[:, 1:]) and not torch.equal(ts, tu)
    assert ts[0, 0] == 1 and tu[0, 0] == 0 and torch.equal(ps, torch.arange(9))  # entry 1: f_0 with t_1 / t_0
    assert torch.equal(fs, feats[:, :-1]) and torch.equal(ys, feats[:, 1:])


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("shift,inputs", [("shifted", "feature+token"), ("unshifted", "feature+token"),
                                          ("shifted", "feature"), ("shifted", "token")])
def test_training_steps_lower_the_loss(target, shift, inputs):
    torch.manual_seed(0)
    head = EagleHead(head_config_from_target(target.config, shift, inputs=inputs))
    frozen = Frozen(target, "cpu")
    batch = random_batch(target, B=2, L=32)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3, betas=(0.9, 0.95))
    losses = []
    for _ in range(20):
        loss, vloss, ploss, n = head_loss(head, frozen, *batch, shift, noise=0.1, p_weight=0.1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
        opt.step()
        losses.append(loss.item())
    assert n > 0
    # a token-only head must predict the target's feature from tokens alone: it learns, but slower
    assert sum(losses[-5:]) / 5 < (0.9 if inputs == "token" else 0.7) * sum(losses[:5]) / 5


def test_restricted_vocabulary_ce(target):
    class S:
        pass
    s = S()
    s.input_ids = torch.tensor([5, 5, 5, 7, 7, 9])
    s.loss_mask = torch.tensor([1, 1, 1, 1, 1, 0], dtype=torch.bool)
    ids, cov = ce_vocabulary([s], 2, target.vocab_size)
    assert ids.tolist() == [5, 7] and cov == 1.0
    frozen = Frozen(target, "cpu", ids)
    head = EagleHead(head_config_from_target(target.config, "shifted"))
    loss, _, ploss, _ = head_loss(head, frozen, *random_batch(target), "shifted", 0.0, 0.1)
    assert torch.isfinite(loss) and float(ploss) > 0


def test_rollout_matches_step_by_step_chains(target):
    """The one-pass-per-depth roll-out equals running each chain explicitly with plain causal attention."""
    torch.manual_seed(1)
    head = EagleHead(head_config_from_target(target.config, "shifted")).eval()
    ids, feats, mask = random_batch(target, B=1, L=12)
    f_in, tok, _, _, pos = D.make_pairs(ids, feats.float(), mask, "shifted")
    emb = F.embedding(tok, target.embed_tokens.weight)
    depth = 3
    with torch.no_grad():
        preds = rollout(head, f_in, emb, pos[None], depth)
        plain = head(f_in, emb, pos[None])
        assert torch.allclose(preds[0], plain, atol=1e-5)
        n = f_in.shape[1]
        for c in range(n - depth):  # chain starting at entry c
            inp = f_in[:, :c + 1].clone()
            out = head(inp, emb[:, :c + 1], pos[None, :c + 1])[:, -1:]
            for d in range(1, depth + 1):
                inp = torch.cat([inp, out], dim=1)
                out = head(inp, emb[:, :c + 1 + d], pos[None, :c + 1 + d])[:, -1:]
                assert torch.allclose(preds[d][:, c + d], out[:, 0], atol=1e-4), (c, d)


def test_evaluate_reports_alpha(target):
    head = EagleHead(head_config_from_target(target.config, "shifted"))
    ids, feats, mask = random_batch(target, B=3, L=30)
    seqs = [D.Sequence(f"c{i}", ids[i], feats[i], mask[i]) for i in range(3)]
    m = evaluate(head, Frozen(target, "cpu"), seqs, "shifted", depth=4)
    assert len(m["alpha"]) == 5 and len(m["chain"]) == 5
    assert all(0 <= a <= 1 for a in m["alpha"] + m["chain"])
    assert m["chain"] == sorted(m["chain"], reverse=True) and m["top1"] == m["alpha"][0]


def test_saved_head_loads_and_predicts(target, tmp_path):
    torch.manual_seed(2)
    head = EagleHead(head_config_from_target(target.config, "unshifted")).eval()
    head.save(str(tmp_path / "h"), extra={"eagle_training": {"steps": 1}})
    loaded = load_head(str(tmp_path / "h"), target)
    assert loaded.shift == "unshifted"
    x, e = torch.randn(1, 5, 64), torch.randn(1, 5, 64)
    pos = torch.arange(5)[None]
    with torch.no_grad():
        assert torch.allclose(head(x, e, pos), loaded(x, e, pos), atol=1e-6)


@pytest.mark.slow
def test_cli_end_to_end_and_resume(target, tmp_path):
    """All stages on a few real ShareGPT conversations with the tiny target; a second call resumes."""
    args = ["--shift", "shifted", "--conversations", "6", "--max-len", "768", "--heldout-eval", "3",
            "--epochs", "1", "--batch-tokens", "1536", "--warmup-steps", "2", "--ce-vocab", "64",
            "--data-dir", str(tmp_path / "feats"), "--run-dir", str(tmp_path / "run"),
            "--out", str(tmp_path / "head"), "--no-progress", "--no-extract-bf16"]
    cfg = T.parse_args(args)
    card = T.train(cfg, target=target)
    assert card["steps"] >= 2 and card["data"]["conversations"] == 6
    assert len(card["heldout_metrics_per_epoch"]) == 1
    with open(tmp_path / "head" / "training.json") as f:
        assert json.load(f)["final_heldout_metrics"]["alpha"]
    assert load_head(str(tmp_path / "head"), target).shift == "shifted"
    card2 = T.train(T.parse_args(args), target=target)  # finished run: nothing more to train
    assert card2["steps"] == card["steps"]
    assert os.path.exists(tmp_path / "feats" / "train" / "meta.json")
    # a second phase starts from the saved head
    args3 = args[:args.index("--run-dir")] + ["--run-dir", str(tmp_path / "run2"), "--out", str(tmp_path / "head2"),
                                              "--init", str(tmp_path / "head"), "--no-progress", "--no-extract"]
    card3 = T.train(T.parse_args(args3), target=target)
    assert card3["initialised_from"] == str(tmp_path / "head") and card3["previous_phase"]["steps"] == card["steps"]
    # self-distilled sequences (regenerate.py's shards) join the training set, counted --selfgen-repeat times
    train_seqs = D.FeatureStore(str(tmp_path / "feats" / "train")).seqs
    gen_dir = tmp_path / "selfgen"
    gen_dir.mkdir()
    D._save_shard(str(gen_dir / "shard-gen0000.pt"),
                  [D.Sequence("gen:" + s.conv_id, s.input_ids, s.features, s.loss_mask) for s in train_seqs[:2]])
    args4 = args3[:args3.index("--run-dir")] + ["--run-dir", str(tmp_path / "run3"), "--out", str(tmp_path / "head3"),
                                                "--init", str(tmp_path / "head"), "--no-progress", "--no-extract",
                                                "--selfgen-dir", str(gen_dir), "--selfgen-repeat", "3"]
    card4 = T.train(T.parse_args(args4), target=target)
    sd = card4["data"]["self_distilled"]
    assert sd["sequences"] == 2 and sd["repeat"] == 3 and card4["data"]["conversations"] == 6
    assert sd["answer_tokens"] == sum(int(s.loss_mask.sum()) for s in train_seqs[:2])
    assert card4["steps"] > card3["steps"]
    # the Paper lab's ablation heads: --inputs, an explicit --out, fp16 weights on disk
    base = args[:args.index("--run-dir")] + ["--no-progress", "--no-extract"]
    with pytest.raises(SystemExit, match="give --out"):
        T.train(T.parse_args(base + ["--inputs", "token"]), target=target)
    card5 = T.train(T.parse_args(base + ["--inputs", "token", "--run-dir", str(tmp_path / "run5"),
                                         "--out", str(tmp_path / "head5"), "--save-fp16"]), target=target)
    assert card5["kind"] == "token only" and card5["inputs"] == "token" and card5["steps"] == card["steps"]
    from safetensors.torch import load_file
    assert load_file(str(tmp_path / "head5" / "model.safetensors"))["fc.weight"].shape == (64, 64)
    assert load_file(str(tmp_path / "head5" / "model.safetensors"))["fc.weight"].dtype == torch.float16
    assert load_head(str(tmp_path / "head5"), target).inputs == "token"


def test_selfgen_sequences_refuse_heldout_prompts(tmp_path):
    held = D.heldout_ids()[0]
    seq = D.Sequence("gen:" + held, torch.arange(5), torch.zeros(5, 4, dtype=torch.float16), torch.ones(5, dtype=torch.bool))
    D._save_shard(str(tmp_path / "shard-gen0000.pt"), [seq])
    with pytest.raises(SystemExit, match="not self-generated training prompts"):
        prepare.selfgen_store(str(tmp_path), D.heldout_ids())
    seq.conv_id = "gen:zzz_0"
    D._save_shard(str(tmp_path / "shard-gen0000.pt"), [seq])
    assert [s.conv_id for s in prepare.selfgen_store(str(tmp_path), D.heldout_ids()).seqs] == ["gen:zzz_0"]
    seq.conv_id = "zzz_0"            # a ShareGPT feature shard is not self-distilled data
    D._save_shard(str(tmp_path / "shard-gen0000.pt"), [seq])
    with pytest.raises(SystemExit):
        prepare.selfgen_store(str(tmp_path), D.heldout_ids())
