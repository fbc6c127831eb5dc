"""Per-row-count kernel choice: the plan follows the timings, the dispatch follows the plan, results match."""
import time

import torch

from conftest import tiny_llama
from eagle_core.model import cpu_kernels as K


def test_choice_table_follows_timings_and_fills_between_probes():
    # plain faster for 1-3 rows, packed clearly faster from 4, a near-tie at 16 stays plain (the stock kernel)
    t = {1: (1.0, 1.3), 2: (1.0, 1.3), 3: (1.1, 1.3), 4: (1.5, 1.3), 8: (1.7, 1.4), 16: (2.0, 1.99)}
    table = K.choice_table(t)
    assert table[1:4] == [False, False, False]
    assert table[4:16] == [True] * 12          # 5..7 and 9..15 take the choice of the probe below
    assert not any(table[16:])                 # 16 and above: the near-tie keeps the plain kernel


def test_forced_modes_and_identical_results():
    model = tiny_llama(seed=5)
    x = torch.randn(1, 6, model.config.hidden_size)
    lin = model.model.layers[0].mlp.up_proj
    ref = torch.nn.functional.linear(x, lin.weight)
    for mode in ("plain", "packed"):
        m = tiny_llama(seed=5)
        plan = K.plan_kernels(m, mode=mode)
        assert plan["layers"] == 2 * 7 + 1 and plan["mode"] == mode
        assert plan["packed_from_rows"] == (1 if mode == "packed" else None)
        with torch.no_grad():
            got = m.model.layers[0].mlp.up_proj(x)
        assert torch.allclose(got, ref, atol=1e-5)
        assert "forced" in K.describe(plan)


def test_dispatch_runs_the_planned_kernel(monkeypatch):
    lin = torch.nn.Linear(16, 8)
    K.plan_kernels(lin, mode="plain")
    lin._use_packed[3:] = [True] * (len(lin._use_packed) - 3)     # packed from 3 rows
    calls = []
    real = K._packed
    monkeypatch.setattr(K, "_packed", lambda x, w, b: calls.append(x.shape[0]) or real(x, w, b))
    with torch.no_grad():
        for rows in (1, 2, 3, 7, 400):
            y = lin(torch.randn(rows, 16))
            assert y.shape == (rows, 8)
    assert calls == [3, 7, 400]                # 400 > the table: the last entry's choice


def test_auto_plan_times_whole_passes():
    """A fake pass whose cost depends on the kernel the layers would use: the plan must pick the cheaper."""
    model = tiny_llama(seed=6)
    layer = model.model.layers[0].self_attn.q_proj

    def run(rows):
        packed = layer._use_packed[rows if rows < len(layer._use_packed) else -1]
        slow = (packed and rows < 4) or (not packed and rows >= 4)
        time.sleep(0.004 if slow else 0.001)

    plan = K.plan_kernels(model, mode="auto", run=run, rows_list=(1, 2, 4, 8))
    assert plan["how"] == "model" and plan["packed_from_rows"] == 4
    assert set(plan["ms"]) == {1, 2, 4, 8}
    assert not layer._use_packed[1] and not layer._use_packed[3] and layer._use_packed[4] and layer._use_packed[9]
    lm = model.lm_head
    assert lm._use_packed is not layer._use_packed and lm._use_packed[5]   # every layer follows the one plan
    assert "plain below 4 rows, oneDNN-packed from 4" in K.describe(plan)


def test_layer_timing_without_a_pass():
    head_like = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 32))
    plan = K.plan_kernels(head_like, mode="auto", rows_list=(1, 4))
    assert plan["how"] == "layers" and plan["layers"] == 2 and set(plan["ms"]) == {"64x32 float32", "32x64 float32"}
    with torch.no_grad():
        x = torch.randn(4, 32)
        ref = torch.nn.functional.linear(torch.nn.functional.linear(x, head_like[0].weight, head_like[0].bias),
                                         head_like[1].weight, head_like[1].bias)
        assert torch.allclose(head_like(x), ref, atol=1e-5)
