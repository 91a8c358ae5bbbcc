"""The level schedule's tries (rescore.engine.levels.LevelForest), the LSTM's bf16 one-token step and the
bf16 row padding of the forward calls."""

import torch

from rescore.engine.forest import LevelForest
from rescore.engine.lstm_steps import step_ids
from rescore.engine.types import Hyp
from rescore.models import ModelConfig, build_model
from rescore.vocab import Vocabulary

EOS = 0


def hyp(*ident):
    # identities >= 10 stand for OOV words: their input id is <unk> (1)
    return Hyp([w if w < 10 else 1 for w in ident], list(ident))


def test_every_distinct_prefix_is_one_node_numbered_by_level():
    parts = [[hyp(2, 3, 4), hyp(2, 3), hyp(2, 5, 4), hyp(2, 3, 4), hyp(), hyp(6)],
             [hyp(2, 3, 4), hyp(11, 3), hyp(12, 3)]]
    f = LevelForest.build(parts, EOS)
    prefixes = {(p, tuple(h.ident[:d])) for p, part in enumerate(parts) for h in part
                for d in range(1, len(h.ident) + 1)}
    assert f.n_nodes == len(parts) + len(prefixes)  # roots + one node per distinct prefix
    depth = [0] * f.n_nodes
    for n in range(len(parts), f.n_nodes):
        assert f.parent[n] < n
        depth[n] = depth[f.parent[n]] + 1
    for d in range(len(f.level_start) - 1):  # level d is a range of ids, all of depth d
        assert all(depth[n] == d for n in range(f.level_start[d], f.level_start[d + 1]))
    pos = 0
    for p, part in enumerate(parts):
        for h in part:
            path = f.path[pos:pos + len(h.ident) + 1].tolist()
            pos += len(h.ident) + 1
            nodes, end = path[:-1], path[-1] - f.n_nodes
            assert [f.tok_ident[n] for n in nodes] == h.ident  # the edges lead into its words
            assert [f.tok_id[n] for n in nodes] == h.ids
            chain = [p] + nodes
            assert all(f.parent[b] == a for a, b in zip(chain, chain[1:]))
            assert end == chain[-1]  # its end of sentence is scored after its last word
    assert pos == len(f.path)
    # OOV words with different identities are different nodes, with the same input id
    assert len({n for n in range(f.n_nodes) if f.tok_ident[n] in (11, 12)}) == 2


def test_bf16_step_is_close_to_fp32_and_keeps_states_in_fp32():
    torch.manual_seed(0)
    vocab = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(50)])
    model = build_model(ModelConfig(arch="lstm", hidden=32, layers=2), vocab).eval()
    state = model.body.init_state(5)
    state = {k: torch.randn_like(v) * 0.5 for k, v in state.items()}
    ids = torch.randint(0, 52, (5, 1))
    with torch.no_grad():
        h32, s32 = step_ids(model.body, ids, model.embedding.weight, state)
        h16, s16 = step_ids(model.body, ids, model.embedding.weight, state, torch.bfloat16)
        out, _ = model.body(model.embedding(ids), state)
    assert torch.allclose(h32, out, atol=1e-5)  # the fp32 step is the LSTM
    assert h16.dtype == s16["c"].dtype == torch.float32
    assert (h16 - h32).abs().max() < 0.05 and not torch.equal(h16, h32)


def test_padded_rows_repeat_the_last_row_up_to_a_bucket():
    from rescore.engine.forward import padded_rows

    idx = padded_rows(10, 13)
    assert len(idx) == 64 and idx[:3].tolist() == [10, 11, 12] and set(idx[3:].tolist()) == {12}
    assert len(padded_rows(0, 64)) == 64 and len(padded_rows(0, 1100)) == 1280
