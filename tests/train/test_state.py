"""LMState: rows of a store shared by states, through select, cat and put."""

from __future__ import annotations

import torch

from rescore.models.base import EMPTY, LMState, forget_inputs


def state(rows, store_rows, offset=0.0):
    """A state of len(rows) rows referring to ``rows`` of a store of ``store_rows`` rows; each
    store row is filled with its number (+ offset), each state row has its own vector."""
    store = (torch.arange(store_rows, dtype=torch.float32) + offset).view(-1, 1, 1).expand(-1, 3, 2).clone()
    return LMState({"h": torch.arange(len(rows), dtype=torch.float32).view(-1, 1) + offset,
                    "win": torch.tensor(rows)}, {"win": store})


def rows_of(st):
    """Each state row's store row, as the store's values (what a model reads)."""
    return st.stores["win"][st.tensors["win"]][:, 0, 0].tolist()


def test_select_and_cat_of_one_store_copy_no_rows():
    st = state([0, 1, 1, 0], 2)
    sel = st.select(torch.tensor([2, 0]))
    assert sel.stores["win"] is st.stores["win"]
    assert rows_of(sel) == [1.0, 0.0] and sel.tensors["h"].view(-1).tolist() == [2.0, 0.0]
    both = LMState.cat([sel, st.select(torch.tensor([1]))])
    assert both.stores["win"] is st.stores["win"]
    assert rows_of(both) == [1.0, 0.0, 1.0]


def test_cat_of_different_stores_keeps_the_rows_referred_to():
    a = state([0, 2], 3)            # store rows 0, 1, 2: row 1 unused
    b = state([1, 1], 2, offset=10)  # store rows 10, 11
    both = LMState.cat([a, b])
    assert rows_of(both) == [0.0, 2.0, 11.0, 11.0]
    assert len(both.stores["win"]) == 3  # rows 0 and 2 of a, row 1 of b
    assert both.tensors["h"].view(-1).tolist() == [0.0, 1.0, 10.0, 11.0]


def test_put_merges_stores_and_drops_rows_no_longer_referred_to():
    starts = state([0, 1, 2], 3)
    ends = state([1], 2, offset=10)  # a new store: its row 1 (value 11)
    starts.put(torch.tensor([1]), ends)
    assert rows_of(starts) == [0.0, 11.0, 2.0]
    assert len(starts.stores["win"]) == 3  # old rows 0 and 2, the new one; old row 1 dropped
    assert starts.tensors["h"].view(-1).tolist() == [0.0, 10.0, 2.0]
    same = state([0, 1, 2], 3)
    other = same.select(torch.tensor([2]))
    same.put(torch.tensor([0]), other)  # the same store: row numbers only
    assert same.stores["win"] is other.stores["win"] and rows_of(same) == [2.0, 1.0, 2.0]


def test_forget_inputs_empties_the_latest_slots_of_a_copy():
    ident = torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]])
    st = LMState({"hist_ident": ident})
    forget_inputs(st, [[True, False], [False, False, True, True, False, True]])
    assert ident.tolist() == [[5, 6, 7, 8], [1, 2, 3, 4]]  # the caller's tensor is untouched
    # row 0: its last two inputs are slots 2, 3; row 1: six flags, the last four fit the window
    assert st.tensors["hist_ident"].tolist() == [[5, 6, EMPTY, 8], [EMPTY, EMPTY, 3, EMPTY]]
