"""The implicit cache pointer head against a slow reference: a Python loop over positions that
builds the at-least-one-hot supervision vector s_t explicitly (Li, Povey, Khudanpur 2020)."""

import pytest
import torch

from rescore.models import EMPTY, HEADS, ModelConfig
from rescore.models.history import slide

V, H, L, B, T = 7, 5, 4, 3, 6


def make_head(memory_aug):
    torch.manual_seed(0)
    config = ModelConfig(head="pointer", vocab_size=V, hidden=H, history=L, memory_aug=memory_aug)
    decoder = torch.nn.Linear(H, V).double()
    head = HEADS["pointer"](config, decoder).double()
    return head, decoder


def random_tokens(n_chunks):
    """Ids and identities with repeats and OOV words (identities >= V, ids = <unk> = 1)."""
    g = torch.Generator().manual_seed(1)
    ident = torch.randint(0, V + 3, (B, n_chunks * T + 1), generator=g)  # V..V+2: OOV words
    ident[:, 5] = ident[:, 2]  # a guaranteed repeat
    ident[0, 3] = V + 1  # an OOV word ...
    ident[0, 4] = V + 1  # ... that repeats
    ident[1, 7] = V + 2  # an OOV target that is not in the history
    ident[1, :7] = torch.where(ident[1, :7] == V + 2, torch.tensor(0), ident[1, :7])
    ids = torch.where(ident >= V, torch.tensor(1), ident)
    return ids, ident


def reference_loss(head, decoder, hidden, ident, target_ids, target_ident):
    """sum_t -log(y_t . s_t), one position at a time; history = the last L identities (and m_k)."""
    W_p = head.pointer.weight
    total = hidden.new_zeros(())
    for b in range(hidden.shape[0]):
        hist_ident, hist_mem = [EMPTY] * L, [hidden.new_zeros(())] * L
        for t in range(hidden.shape[1]):
            h = hidden[b, t]
            hist_ident = hist_ident[1:] + [int(ident[b, t])]
            m = head.memory.weight[0] @ h if head.memory_aug else hidden.new_zeros(())
            hist_mem = hist_mem[1:] + [m]
            z_vocab = decoder.weight @ h + decoder.bias
            z_ptr = []
            for i in range(L):
                if hist_ident[i] == EMPTY:
                    z_ptr.append(hidden.new_tensor(float("-inf")))
                else:
                    z_ptr.append(W_p[i] @ h + (hist_mem[i] if head.memory_aug else 0))
            y = torch.softmax(torch.cat([z_vocab, torch.stack(z_ptr)]), dim=0)
            s = torch.zeros(V + L, dtype=hidden.dtype)
            s[int(target_ids[b, t])] = 1.0
            for i in range(L):
                if hist_ident[i] == int(target_ident[b, t]):
                    s[V + i] = 1.0
            total = total - torch.log(y @ s)
    return total


@pytest.mark.parametrize("memory_aug", [False, True])
def test_pointer_matches_reference_loss_and_grads(memory_aug):
    head, decoder = make_head(memory_aug)
    n_chunks = 2
    ids, ident = random_tokens(n_chunks)
    hidden = torch.randn(B, n_chunks * T, H, dtype=torch.float64, requires_grad=True)
    params = [hidden] + list(head.parameters())

    # fast: two chunks, history carried in the state
    state = head.init_state(B)
    state = {k: (v.double() if v.is_floating_point() else v) for k, v in state.items()}
    fast = 0.0
    for c in range(n_chunks):
        sl = slice(c * T, (c + 1) * T)
        out, state = head(hidden[:, sl], None, ident[:, sl], state)
        tgt = slice(c * T + 1, (c + 1) * T + 1)
        fast = fast - out.log_prob(ids[:, tgt], ident[:, tgt]).sum()
    g_fast = torch.autograd.grad(fast, params)

    ref = reference_loss(head, decoder, hidden, ident[:, :-1], ids[:, 1:], ident[:, 1:])
    g_ref = torch.autograd.grad(ref, params)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0)
    for gf, gr in zip(g_fast, g_ref):
        assert torch.allclose(gf, gr, atol=1e-5, rtol=0)
    assert memory_aug == (head.memory is not None)


def test_oov_copy_and_unk():
    """An OOV word in the history gets copy mass on top of <unk>; one not in the history is <unk>."""
    head, decoder = make_head(False)
    hidden = torch.randn(1, 3, H, dtype=torch.float64)
    ident = torch.tensor([[V + 5, 2, 3]])
    out, _ = head(hidden, None, ident, head.init_state(1))
    unk = torch.tensor([[1, 1, 1]])
    seen = out.log_prob(unk, torch.tensor([[V + 5] * 3]))
    unseen = out.log_prob(unk, torch.tensor([[V + 9] * 3]))
    assert torch.allclose(unseen, out.log_vocab[..., 1])
    assert (seen > unseen).all()
    # total probability over the vocabulary words and the one OOV word in the history is 1
    probs = out.log_vocab.exp().sum(-1)
    assert torch.allclose(probs + out.log_slot.exp().nansum(-1), torch.ones(1, 3, dtype=torch.float64))


def test_slide_windows():
    carried = torch.tensor([[-1, -1, 7]])
    cur = torch.tensor([[1, 2, 3, 4]])
    win, new = slide(carried, cur)
    assert win.tolist() == [[[-1, 7, 1], [7, 1, 2], [1, 2, 3], [2, 3, 4]]]
    assert new.tolist() == [[2, 3, 4]]


def test_pointer_extra_parameters():
    for mem, extra in [(False, L * H), (True, (L + 1) * H)]:
        head, _ = make_head(mem)
        own = sum(p.numel() for n, p in head.named_parameters() if not n.startswith("decoder"))
        assert own == extra
