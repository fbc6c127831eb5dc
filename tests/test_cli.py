"""The generate CLI: JSON output, samples, and one-line errors (never a traceback) on bad input."""
from __future__ import annotations

import json

import pytest

from conftest import tiny_llama
from eagle_core.generate import main
from eagle_core.model.head import random_head
from eagle_core.model.target import load_target


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, real_tokenizer):
    d = tmp_path_factory.mktemp("tiny_target")
    tiny_llama(max_position_embeddings=256).save_pretrained(str(d))
    real_tokenizer.save_pretrained(str(d))
    return str(d)


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory, model_dir):
    d = tmp_path_factory.mktemp("head")
    random_head(load_target(model_dir, device="cpu"), seed=2).save(str(d))
    return str(d)


def run_cli(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_output(capsys, model_dir, head_dir):
    rc, out, _ = run_cli(capsys, "--target", model_dir, "--head", head_dir, "--prompt", "How can I learn?",
                         "--max-new-tokens", "12", "--draft", "static", "--json")
    assert rc == 0
    d = json.loads(out)
    assert set(d) >= {"text", "token_ids", "new_tokens", "target_forwards", "tau", "seconds", "cycles", "config"}
    assert d["new_tokens"] == len(d["token_ids"]) == 12
    assert d["tau"] == pytest.approx(d["new_tokens"] / d["target_forwards"])
    assert d["cycles"][1]["nodes"][0]["status"] == "root"
    rc, out, _ = run_cli(capsys, "--target", model_dir, "--draft", "vanilla", "--prompt", "How can I learn?",
                         "--max-new-tokens", "12", "--json")
    assert json.loads(out)["token_ids"] == d["token_ids"]   # greedy: identical to plain decoding


def test_samples_and_stream(capsys, model_dir, head_dir):
    rc, out, _ = run_cli(capsys, "--target", model_dir, "--head", head_dir, "--prompt", "hi", "--temperature",
                         "1", "--num-samples", "3", "--seed", "5", "--max-new-tokens", "4")
    assert rc == 0
    samples = json.loads(out)["samples"]
    assert len(samples) == 3 and all(len(s) == 4 for s in samples)
    rc, out, _ = run_cli(capsys, "--target", model_dir, "--head", head_dir, "--prompt", "hi",
                         "--max-new-tokens", "6", "--draft", "chain")
    assert rc == 0 and "tau" in out and "tokens/s" in out


@pytest.mark.parametrize("args,message", [
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", "x", "--temperature", "-1"], "temperature"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max-new-tokens"),
    (["--prompt", "word " * 400], "context"),
    (["--prompt", "x", "--target", "/no/such/model"], "cannot load target"),
    (["--prompt", "x", "--head", "/no/such/head"], "not found"),
    (["--prompt", "x", "--draft", "static", "--tree", "nope"], "unknown tree preset"),
])
def test_bad_input_is_one_line(capsys, model_dir, head_dir, args, message):
    full = args if "--target" in args else ["--target", model_dir] + args
    full = full if "--head" in full else full + ["--head", head_dir]
    rc, out, err = run_cli(capsys, *full)
    assert rc != 0
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_head_of_another_model_is_refused(capsys, model_dir, tmp_path, real_tokenizer):
    other = load_target(model=tiny_llama(hidden=32), tokenizer=real_tokenizer, device="cpu")
    random_head(other).save(str(tmp_path / "h32"))
    rc, _, err = run_cli(capsys, "--target", model_dir, "--head", str(tmp_path / "h32"), "--prompt", "x")
    assert rc != 0 and "does not match" in err
