"""The fused LSTM cell (rescore.engine.kernels._kernels through rescore.engine.kernels.native) against PyTorch's
arithmetic: the cell alone, and the LSTM body's step with and without it."""

import itertools
import os

import pytest
import torch

from rescore.engine.kernels import native
from rescore.engine.kernels.quant import int8_products
from rescore.engine.lstm_steps import step_ids
from rescore.models.bodies import LSTMBody
from rescore.models.config import ModelConfig

needs_kernels = pytest.mark.skipif(native._kernels is None,
                                   reason="rescore.engine.kernels._kernels was not compiled at install (no C compiler)")


def test_kernels_are_built_in_ci():
    """The README's install compiles them; CI must not pass silently on the slower path."""
    if os.environ.get("CI") and native._kernels is None:
        pytest.fail("rescore.engine.kernels._kernels is missing: the install did not compile "
                    "rescore/engine/kernels/*.c")
    assert native.variant() in ("avx2", "generic", "off", "absent")
    assert native.describe().startswith("fused CPU kernels")


def torch_cell(pre, c_prev, table=None, ids=None):
    """The cell as LSTMBody's PyTorch path computes it (u doubled: tanh(a) = 2 sigmoid(2a) - 1)."""
    g = pre + table[ids] if table is not None else pre.clone()
    i, f, u, o = g.sigmoid().chunk(4, 1)
    c = f * c_prev + i * (2 * u - 1)
    return c, o * (2 * torch.sigmoid(2 * c) - 1)


@needs_kernels
@pytest.mark.parametrize("with_table", [False, True])
def test_lstm_cell_equals_pytorch(with_table):
    torch.manual_seed(0)
    B, H, V = 37, 24, 11
    pre = torch.randn(B, 4 * H) * 4
    pre[0, :5] = torch.tensor([100.0, -100.0, 0.0, 88.5, -90.0])  # saturation, no NaN or inf
    table, ids = (torch.randn(V, 4 * H), torch.randint(0, V, (B,))) if with_table else (None, None)
    state = torch.randn(B, 3, H)  # strided rows, as the engine's (B, layers, H) states
    c_out, h_out = torch.full((B, 3, H), float("nan")), torch.full((B, 3, H), float("nan"))
    copy = torch.full((B, 2 * H), float("nan"))
    native.lstm_cell(pre, state[:, 1], c_out[:, 2], h_out[:, 2], table=table, ids=ids, h_copy=copy[:, :H])
    c, h = torch_cell(pre, state[:, 1], table, ids)
    assert torch.allclose(c_out[:, 2], c, atol=2e-6, rtol=1e-6)
    assert torch.allclose(h_out[:, 2], h, atol=2e-6, rtol=1e-6)
    assert torch.equal(copy[:, :H], h_out[:, 2])
    assert torch.isnan(c_out[:, :2]).all() and torch.isnan(copy[:, H:]).all()  # nothing else written


@needs_kernels
def test_lstm_cell_refuses_bad_tensors():
    pre, c = torch.zeros(4, 32), torch.zeros(4, 8)
    with pytest.raises(ValueError, match="pre must be"):
        native.lstm_cell(pre.double(), c, c.clone(), c.clone())
    with pytest.raises(ValueError, match="c_prev must be"):
        native.lstm_cell(pre, torch.zeros(3, 8), c.clone(), c.clone())
    with pytest.raises(ValueError, match="h_out must be"):
        native.lstm_cell(pre, c, c.clone(), torch.zeros(4, 16)[:, ::2])
    with pytest.raises(IndexError, match="outside the table"):
        native.lstm_cell(pre, c, c.clone(), c.clone(), table=torch.zeros(5, 32), ids=torch.tensor([0, 1, 5, 2]))
    native.lstm_cell(torch.zeros(0, 32), torch.zeros(0, 8), torch.zeros(0, 8), torch.zeros(0, 8))  # no rows


@needs_kernels
@pytest.mark.parametrize("precision", ["fp32", "int8", "bf16"])
def test_lstm_step_native_equals_pytorch_path(monkeypatch, precision):
    torch.manual_seed(2)
    body = LSTMBody(ModelConfig(vocab_size=50, hidden=32, layers=3, dropout=0.0)).eval()
    emb = torch.randn(50, 32)
    ids = torch.randint(0, 50, (29, 1))
    state = {"h": torch.randn(29, 3, 32), "c": torch.randn(29, 3, 32)}
    low = {"fp32": None, "int8": torch.qint8, "bf16": torch.bfloat16}[precision]
    runs = []
    # (int8: PyTorch's dynamic products in both runs; the fused int8 layers have tests below)
    monkeypatch.setattr(native, "int8_layers_usable", lambda hidden: False)
    with torch.no_grad(), (int8_products() if low is torch.qint8 else torch.autocast("cpu", enabled=False)):
        for flag in ("1", "0"):
            monkeypatch.setenv("RESCORE_NATIVE", flag)
            runs.append(step_ids(body, ids, emb, state, low))
        if low is None:  # and nn.LSTM itself, the reference of the engine tests
            monkeypatch.setenv("RESCORE_NATIVE", "1")
            ref, ref_state = body(emb[ids], state)
            assert torch.allclose(runs[0][0], ref, atol=1e-5)
            assert torch.allclose(runs[0][1]["c"], ref_state["c"], atol=1e-5)
    (a, sa), (b, sb) = runs
    assert torch.allclose(a, b, atol=1e-6) and a.shape == (29, 1, 32)
    for k in ("h", "c"):
        assert torch.allclose(sa[k], sb[k], atol=1e-6)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("RESCORE_NATIVE", "0")
    assert not native.available() and not native.usable(torch.zeros(1))
    assert native.variant() in ("off", "absent")


@needs_kernels
def test_rows_dot_equals_gathered_rows():
    torch.manual_seed(3)
    hidden = torch.randn(40, 3, 2, 16)[:, :, 1]  # (B, T, H) with strided rows, as the engine's
    weight, bias = torch.randn(100, 16), torch.randn(100)
    b, t, ids = torch.randint(0, 40, (500,)), torch.randint(0, 3, (500,)), torch.randint(0, 100, (500,))
    want = (hidden[b, t] * weight[ids]).sum(-1)
    assert torch.allclose(native.rows_dot(hidden, b, t, weight, bias, ids), want + bias[ids], atol=1e-5)
    assert torch.allclose(native.rows_dot(hidden, b, t, weight, None, ids), want, atol=1e-5)
    assert native.rows_dot(hidden, b[:0], t[:0], weight, bias, ids[:0]).shape == (0,)
    with pytest.raises(IndexError, match="ids outside"):
        native.rows_dot(hidden, b[:2], t[:2], weight, bias, torch.tensor([3, 100]))
    with pytest.raises(ValueError, match="rows_dot"):
        native.rows_dot(hidden, b, t, weight.double(), bias, ids)


@needs_kernels
def test_unnormalised_head_scores_equal_with_and_without_kernels(monkeypatch):
    from rescore.engine.lstm_steps import rows_scorer
    from rescore.models.heads import OutputRows

    torch.manual_seed(4)
    decoder = torch.nn.Linear(16, 100)
    hidden = torch.randn(7, 5, 16)
    b, t, ids = torch.randint(0, 7, (60,)), torch.randint(0, 5, (60,)), torch.randint(0, 100, (60,))
    with torch.no_grad():
        got = rows_scorer(OutputRows(decoder, hidden))(b, t, ids)
        want = OutputRows(decoder, hidden)(b, t, ids)
        monkeypatch.setenv("RESCORE_NATIVE", "0")
        off = rows_scorer(OutputRows(decoder, hidden))(b, t, ids)
    assert torch.allclose(got, want, atol=1e-5) and torch.equal(off, want)


@needs_kernels
def test_logsumexp_rows_equals_pytorch():
    torch.manual_seed(1)
    x = torch.randn(3, 5, 1100) * 6
    x[0, 0, :7] = float("-inf")
    x[1, 1] = float("-inf")  # every entry
    x[2, 2, 3] = 80.0
    x[2, 3, 5] = float("nan")
    x[2, 4, 9] = float("inf")
    got, want = native.logsumexp_rows(x), torch.logsumexp(x, -1)
    assert got.shape == (3, 5)
    assert got[1, 1] == float("-inf") and torch.isnan(got[2, 3]) and got[2, 4] == float("inf")
    finite = torch.isfinite(want)
    assert torch.allclose(got[finite], want[finite], atol=1e-5, rtol=1e-6)
    assert torch.allclose(native.logsumexp_rows(x[0].t()), torch.logsumexp(x[0].t(), -1), atol=1e-5)
    with pytest.raises(ValueError, match="logsumexp_rows"):
        native.logsumexp_rows(x.double())


@needs_kernels
def test_softmax_head_reads_targets_only_inside_the_engine():
    """The engine's paths (rescore.engine.lstm_steps.InferencePaths, handed to forward) read a
    softmax head for its targets only: each row's log Z, no (B, T, V) log-probabilities, the
    same values as the head's own forward."""
    from rescore.engine.lstm_steps import InferencePaths
    from rescore.models import build_model
    from rescore.vocab import Vocabulary

    torch.manual_seed(5)
    model = build_model(ModelConfig(hidden=16, layers=1, dropout=0.0),
                        Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(40)])).eval()
    ids = torch.randint(0, 42, (3, 4))
    with torch.no_grad():
        full, _ = model(ids, ids, model.initial_state(3))
        rows, _ = model(ids, ids, model.initial_state(3), inference=InferencePaths())
    assert full.log_vocab is not None and rows.log_vocab is None
    b, t = torch.randint(0, 3, (30,)), torch.randint(0, 4, (30,))
    tid = torch.randint(0, 42, (30,))
    assert torch.allclose(rows.vocab_at(b, t, tid), full.log_vocab[b, t, tid], atol=1e-5)
    assert torch.allclose(rows.log_norm, full.log_norm, atol=1e-5)
    assert torch.allclose(rows.log_prob(ids, ids), full.log_prob(ids, ids), atol=1e-5)


def integer_reference(x_q, layer, c_prev, table=None, ids=None):
    """lstm_int8's arithmetic in float64 from the same integers: ((q - 64) . w_q) s_n / 63 + b."""
    acc = (x_q.double() - native.Q_ZERO) @ layer.weight_q.double().t()
    pre = acc * (layer.scale.double() / native.Q_SCALE) + layer.bias.double()
    if table is not None:
        pre = pre + table[ids].double()
    i, f, u, o = pre.chunk(4, 1)
    c = f.sigmoid() * c_prev.double() + i.sigmoid() * (2 * u.sigmoid() - 1)
    return c, o.sigmoid() * torch.tanh(c)


@needs_kernels
@pytest.mark.parametrize("K,with_table", [(16, True), (10, False), (32, False)])
def test_lstm_int8_layer_equals_integer_arithmetic(K, with_table):
    """One int8 layer step: the same integers as a float64 reference, to float32 rounding; its
    float product within int8 rounding of the float layer; nothing written outside the rows
    given (strided states, as the engine's (B, layers, H))."""
    torch.manual_seed(4)
    B, H, V = 37, 16, 13
    w, b = torch.randn(4 * H, K) * 0.3, torch.randn(4 * H) * 0.1
    layer = native.Int8LSTMLayer(w, b)
    x = torch.rand(B, K) * 2 - 1
    x[0, :3] = torch.tensor([1.0, -1.0, 0.0])
    x_q = torch.zeros(B, K + 3, dtype=torch.uint8)[:, 1:K + 1]  # strided rows
    native.quantize_rows(x, x_q)
    assert torch.equal(x_q.long(), (x * 63).round().long() + 64)
    table, ids = (torch.randn(V, 4 * H), torch.randint(0, V, (B,))) if with_table else (None, None)
    state = torch.randn(B, 3, H)
    c_out, h_out = torch.full((B, 3, H), float("nan")), torch.full((B, 3, H), float("nan"))
    q_out = torch.zeros(B, 2 * H, dtype=torch.uint8)
    native.lstm_int8(x_q, layer, state[:, 1], c_out[:, 2], h_out[:, 2], table=table, ids=ids, q_out=q_out[:, H:])
    c, h = integer_reference(x_q, layer, state[:, 1], table, ids)
    assert (c_out[:, 2].double() - c).abs().max() < 2e-6
    assert (h_out[:, 2].double() - h).abs().max() < 2e-6
    assert torch.equal(q_out[:, H:].long(), (h_out[:, 2] * 63).round().long() + 64)
    assert torch.isnan(c_out[:, :2]).all() and torch.isnan(h_out[:, :2]).all() and not q_out[:, :H].any()
    # the int8 product against the float one: within the rounding of weights and inputs
    pre_q = (x_q.double() - 64) @ layer.weight_q.double().t() * (layer.scale.double() / 63)
    pre_f = x.double() @ w.double().t()
    assert (pre_q - pre_f).abs().max() < 0.02 * K ** 0.5


def test_int8_packing_is_the_headers_layout():
    """Both int8 layers pack through pack_int8_blocks, whose bytes are where kernels.h's tiles
    read them: wb[kq * 128 + n * 4 + k] of block jb is column 32 jb + n, input 4 kq + k (an LSTM
    layer's column n of block jb: gate n // 8, unit 8 jb + n % 8)."""
    torch.manual_seed(2)
    H, K = 16, 12
    lstm = native.Int8LSTMLayer(torch.randn(4 * H, K))
    out = native.Int8OutputLayer(torch.randn(40, K))
    q_lstm = lstm.weight_q
    flat = lstm.packed.flatten()
    Kq = lstm.groups
    for jb, kq, n, k in itertools.product(range(H // 8), range(Kq), range(32), range(4)):
        row = (n // 8) * H + 8 * jb + n % 8
        assert flat[jb * Kq * 128 + kq * 128 + n * 4 + k] == q_lstm[row, 4 * kq + k]
    flat, Kq = out.packed.flatten(), out.groups
    for jb, kq, n, k in itertools.product(range(out.blocks), range(Kq), range(32), range(4)):
        v = 32 * jb + n
        want = out.weight_q[v, 4 * kq + k] if v < 40 else 0
        assert flat[jb * Kq * 128 + kq * 128 + n * 4 + k] == want
    with pytest.raises(ValueError, match="multiple of 32"):
        native.pack_int8_blocks(torch.zeros(33, 4, dtype=torch.int8))


@needs_kernels
def test_int8_sums_at_the_extremes_do_not_overflow():
    """Weights on 63 levels (|q| <= 63) and inputs in [1, 127]: the AVX2 code sums four products
    of a column in 16 bits before widening, at most 4 x 127 x 63 = 32004; the extremes (every
    weight +-63, every input 127 or 1) give the integer reference."""
    H, K, B = 8, 64, 6
    w = torch.ones(4 * H, K)
    w[1::2] = -1.0
    layer = native.Int8LSTMLayer(w)
    assert layer.weight_q.abs().max() == native.W_MAX == 63
    x = torch.ones(B, K)
    x[1] = -1.0
    x[2, ::2] = -1.0
    x_q = torch.empty(B, K, dtype=torch.uint8)
    native.quantize_rows(x, x_q)
    c_prev, c_out, h_out = torch.zeros(B, H), torch.empty(B, H), torch.empty(B, H)
    native.lstm_int8(x_q, layer, c_prev, c_out, h_out)
    c, h = integer_reference(x_q, layer, c_prev)
    assert (c_out.double() - c).abs().max() < 2e-6 and (h_out.double() - h).abs().max() < 2e-6


@needs_kernels
def test_lstm_int8_refuses_bad_tensors():
    layer = native.Int8LSTMLayer(torch.randn(32, 8))
    x_q, c = torch.zeros(4, 8, dtype=torch.uint8), torch.zeros(4, 8)
    with pytest.raises(ValueError, match="weight"):
        native.Int8LSTMLayer(torch.randn(24, 8))  # H = 6: not whole blocks of 8
    with pytest.raises(ValueError, match="x_q must be"):
        native.lstm_int8(x_q.float(), layer, c, c.clone(), c.clone())
    with pytest.raises(ValueError, match="x_q must be"):
        native.lstm_int8(torch.zeros(4, 9, dtype=torch.uint8), layer, c, c.clone(), c.clone())
    with pytest.raises(ValueError, match="c_prev must be"):
        native.lstm_int8(x_q, layer, torch.zeros(3, 8), c.clone(), c.clone())
    with pytest.raises(IndexError, match="outside the table"):
        native.lstm_int8(x_q, layer, c, c.clone(), c.clone(), table=torch.zeros(5, 32), ids=torch.tensor([0, 1, 5, 2]))
    with pytest.raises(ValueError, match="quantize_rows"):
        native.quantize_rows(torch.zeros(4, 8), torch.zeros(4, 8, dtype=torch.int8))
    native.lstm_int8(torch.zeros(0, 8, dtype=torch.uint8), layer, torch.zeros(0, 8), torch.zeros(0, 8),
                     torch.zeros(0, 8))  # no rows


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@needs_kernels
def test_lstm_step_int8_fused_layers(monkeypatch, one_thread):
    """With one torch thread the int8 step runs each layer as one kernel: close to fp32, and a
    row's result does not depend on the other rows of its call (the states' fixed scale; PyTorch's
    dynamic products quantise each call from its own range)."""
    torch.manual_seed(5)
    body = LSTMBody(ModelConfig(vocab_size=50, hidden=32, layers=2, dropout=0.0)).eval()
    emb = torch.randn(50, 32) * 0.3
    ids = torch.randint(0, 50, (29, 1))
    state = {"h": torch.rand(29, 2, 32) * 2 - 1, "c": torch.randn(29, 2, 32)}
    calls = []
    real = native.lstm_int8
    monkeypatch.setattr(native, "lstm_int8", lambda *a, **k: calls.append(1) or real(*a, **k))
    with torch.no_grad():
        ref, ref_state = step_ids(body, ids, emb, state, None)
        with int8_products():
            got, got_state = step_ids(body, ids, emb, state, torch.qint8)
            part, part_state = step_ids(body, ids[3:11], emb, {k: v[3:11] for k, v in state.items()}, torch.qint8)
    assert len(calls) == 2 * 2  # both layers, both calls
    assert (got - ref).abs().max() < 0.02 and (got_state["c"] - ref_state["c"]).abs().max() < 0.05
    assert torch.equal(part, got[3:11]) and torch.equal(part_state["c"], got_state["c"][3:11])


@needs_kernels
def test_generic_code_equals_avx2(tmp_path):
    """RESCORE_NATIVE=generic runs the fallback of a CPU without AVX2: the same integer sums, so
    the same results to float rounding (an int8 LSTM layer, an int8 output layer's log Z)."""
    import subprocess
    import sys

    if native.variant() != "avx2":
        pytest.skip("this CPU runs the generic code already")
    script = (
        "import torch, sys\n"
        "from rescore.engine.kernels import native\n"
        "torch.manual_seed(6)\n"
        "layer = native.Int8LSTMLayer(torch.randn(96, 40) * 0.3, torch.randn(96))\n"
        "x = torch.rand(21, 40) * 2 - 1; q = torch.empty(21, 40, dtype=torch.uint8)\n"
        "native.quantize_rows(x, q)\n"
        "c0 = torch.randn(21, 24); c, h = torch.empty(21, 24), torch.empty(21, 24)\n"
        "t, i = torch.randn(7, 96), torch.randint(0, 7, (21,))\n"
        "native.lstm_int8(q, layer, c0, c, h, table=t, ids=i)\n"
        "out = native.Int8OutputLayer(torch.randn(70, 40) * 0.3, torch.randn(70))\n"
        "z = native.logsumexp_int8(x, out)\n"
        "torch.save({'v': native.variant(), 'c': c, 'h': h, 'z': z}, sys.argv[1])\n")
    runs = {}
    for flag in ("1", "generic"):
        out = tmp_path / f"{flag}.pt"
        subprocess.run([sys.executable, "-c", script, str(out)], check=True,
                       env={**os.environ, "RESCORE_NATIVE": flag})
        runs[flag] = torch.load(out)
    assert runs["1"]["v"] == "avx2" and runs["generic"]["v"] == "generic"
    for k in ("c", "h", "z"):
        assert (runs["1"][k] - runs["generic"][k]).abs().max() < 1e-5


@needs_kernels
@pytest.mark.parametrize("V,K", [(100, 16), (37, 10), (64, 33)])
def test_logsumexp_int8_equals_integer_arithmetic(V, K):
    """An int8 output layer's log Z per row: the same integers as a float64 reference (each row
    of x on its own scale), within int8 rounding of the float layer, a row's result independent
    of the other rows, and V not a multiple of 32 (padded outputs add nothing)."""
    torch.manual_seed(7)
    w, b = torch.randn(V, K) * 0.3, torch.randn(V)
    layer = native.Int8OutputLayer(w, b)
    x = torch.rand(3, 11, K) * 4 - 2
    x[0, 0] = 0.0  # a zero row
    got = native.logsumexp_int8(x, layer)
    assert got.shape == (3, 11) and got.dtype == torch.float32
    s = x.abs().amax(-1, keepdim=True) / 63
    s = torch.where(s > 0, s, torch.ones_like(s))
    u = torch.floor(x / s + 0.5).clamp(-63, 63)
    ref = torch.logsumexp((u.double() @ layer.weight_q.double().t()) * (s.double() * layer.scale.double())
                          + b.double(), -1)
    assert (got.double() - ref).abs().max() < 1e-5
    exact = torch.logsumexp(x.double() @ w.double().t() + b.double(), -1)
    assert (got.double() - exact).abs().max() < 0.05
    assert torch.equal(native.logsumexp_int8(x[1, 3:5], layer), got[1, 3:5])
    with pytest.raises(ValueError, match="rows of"):
        native.logsumexp_int8(torch.zeros(2, K + 1), layer)


@needs_kernels
def test_levels_int8_equals_its_layer_steps_and_refuses_bad_indexes():
    """native.levels_int8 on two tries (roots, then 3 and 2 nodes): each node's states are
    lstm_int8's steps from its parent's, each edge's log P its node's top h . w + b (less the
    row's logsumexp_int8 when given), the end nodes' states copied out; an index out of range or
    edges out of order are refused before the kernel runs."""
    torch.manual_seed(9)
    H, V = 8, 11
    layers = [native.Int8LSTMLayer(torch.randn(4 * H, H) * 0.3),
              native.Int8LSTMLayer(torch.randn(4 * H, 2 * H) * 0.3, torch.randn(4 * H) * 0.1)]
    table, w_out, b_out = torch.randn(V, 4 * H), torch.randn(V, H), torch.randn(V)
    out_layer = native.Int8OutputLayer(w_out, b_out)
    level_start = torch.tensor([0, 2, 5, 7])
    parent = torch.tensor([-1, -1, 0, 0, 1, 2, 4])
    token = torch.tensor([0, 0, 3, 4, 5, 6, 7])
    start_h, start_c = torch.rand(2, 2, H) * 2 - 1, torch.randn(2, 2, H)
    node = torch.tensor([0, 0, 1, 2, 3, 4, 5, 6])
    target = torch.tensor([3, 4, 5, 6, 0, 7, 0, 0])
    slot = torch.arange(8)
    ends = torch.tensor([3, 5, 6])
    for logz in (None, out_layer):
        lp, end_h, end_c = native.levels_int8(level_start, parent, token, layers, table, start_h, start_c,
                                              (node, target, slot), 8, w_out, b_out, logz, ends)
        # the reference: node by node with lstm_int8, each from its parent's float states
        h, c = torch.zeros(7, 2, H), torch.zeros(7, 2, H)
        q = torch.zeros(7, 2, H, dtype=torch.uint8)
        src_q = torch.empty(2, 2, H, dtype=torch.uint8)
        native.quantize_rows(start_h.reshape(4, H), src_q.view(4, H))
        for n in range(7):
            pq, pc = (src_q[n], start_c[n]) if n < 2 else (q[parent[n]], c[parent[n]])
            x1 = torch.empty(1, 2 * H, dtype=torch.uint8)
            native.lstm_int8(pq[0:1], layers[0], pc[0:1], c[n, 0:1], h[n, 0:1], table=table, ids=token[n:n + 1],
                             q_out=x1[:, :H])
            q[n, 0] = x1[0, :H]
            x1[:, H:] = pq[1]
            native.lstm_int8(x1, layers[1], pc[1:2], c[n, 1:2], h[n, 1:2], q_out=q[n, 1:2])
        want = (h[node, 1] * w_out[target]).sum(1) + b_out[target]
        if logz is not None:
            want = want - native.logsumexp_int8(h[node, 1], out_layer)
        assert torch.allclose(lp, want, atol=1e-5)
        assert torch.equal(end_h, h[ends]) and torch.equal(end_c, c[ends])
    args = [level_start, parent, token, layers, table, start_h, start_c, (node, target, slot), 8, w_out, b_out]
    for bad in ((2, torch.tensor([0, 0, 3, 4, 5, 6, V])),                                   # a token past V
                (7, (node.flip(0), target, slot)),                                        # edges out of order
                (1, torch.tensor([-1, -1, 0, 0, 1, 0, 4]))):                              # a parent two levels up
        a = list(args)
        a[bad[0]] = bad[1]
        with pytest.raises(ValueError, match="levels_int8"):
            native.levels_int8(*a)


@needs_kernels
def test_levels_fields_are_one_list_and_a_mismatch_fails_loudly(monkeypatch):
    """levels_int8's fields are listed once (levels.c's LV_FIELD_LIST): Python fills them by the
    names the kernels give, so a field on one side only fails before the kernel runs, and the
    kernels refuse a field count other than theirs."""
    names = native._kernels.levels_fields()
    assert len(names) == len(set(names)) and names[:4] == ("levels", "level_start", "parent", "token")
    values = dict.fromkeys(names, 0)
    assert native.level_fields(values).tolist() == [0] * len(names)
    with pytest.raises(RuntimeError, match="Python only \\['extra'\\]"):
        native.level_fields({**values, "extra": 0})
    with pytest.raises(RuntimeError, match="kernels only \\['end_c'\\]"):
        native.level_fields({k: v for k, v in values.items() if k != "end_c"})
    fields = torch.zeros(len(names) + 1, dtype=torch.int64)
    for count in (len(names) - 1, len(names) + 1):
        with pytest.raises(ValueError, match=f"{count} fields given, these kernels take {len(names)}"):
            native._kernels.levels_int8(fields.data_ptr(), count)
    # a Python side that lists a field the kernels do not have stops levels_int8 itself
    monkeypatch.setattr(native._kernels, "levels_fields", lambda: names + ("new_field",), raising=False)
    H = 8
    layers = [native.Int8LSTMLayer(torch.randn(4 * H, H) * 0.3)]
    one = torch.tensor([0])
    with pytest.raises(RuntimeError, match="kernels only \\['new_field'\\]"):
        native.levels_int8(torch.tensor([0, 1]), torch.tensor([-1]), one, layers, torch.randn(3, 4 * H),
                           torch.zeros(1, 1, H), torch.zeros(1, 1, H), (one, one, one), 1, torch.randn(3, H), None)
