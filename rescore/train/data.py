"""Training text -> token streams -> BPTT chunks (as in pytorch/examples word_language_model).

The corpus is one stream ``<eos> s1 <eos> s2 <eos> ...`` (one ``<eos>`` per sentence: the boundary
convention of rescore.models.base). Inputs are the stream without its last token, targets the
stream shifted by one. Both are cut into B contiguous streams, side by side, then read T columns
at a time; the model state (LSTM h/c, KV cache, pointer history) is carried from one chunk to
the next, so no chunk starts with an empty history except the first:

    stream:  a b c d e f g h i j k l m n o p q r s t      B = 4 streams, T = 2:
    ┌ a b │ c d │ e ┐
    │ f g │ h i │ j │   chunk 0 = columns 0-1, chunk 1 = columns 2-3, chunk 2 = column 4
    │ k l │ m n │ o │   each row is one stream; row b continues where row b-1 ends
    └ p q │ r s │ t ┘

For evaluation (``pad=True``) the last stream is padded and a mask marks real targets, so every
target of the text is scored exactly once. For training the text is trimmed to B equal streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Tuple

import torch
from torch import Tensor

from rescore.errors import RescoreError
from rescore.vocab import Vocabulary, read_sentences


def encode_corpus(sentences: List[List[str]], vocab: Vocabulary) -> Tuple[Tensor, Tensor]:
    """The stream ``<eos> s1 <eos> s2 ... <eos>`` as (ids, identities): (N,) int64 each."""
    words = [vocab.words[vocab.eos_id]]
    for s in sentences:
        words.extend(s)
        words.append(vocab.words[vocab.eos_id])
    ids, ident = vocab.encode(words)
    return torch.tensor(ids, dtype=torch.long), torch.tensor(ident, dtype=torch.long)


@dataclass
class Streams:
    """B parallel streams of inputs and targets, each (B, n) int64; ``mask`` (B, n) bool."""

    ids: Tensor
    ident: Tensor
    target_ids: Tensor
    target_ident: Tensor
    mask: Tensor

    @property
    def n_targets(self) -> int:
        return int(self.mask.sum())

    def shard(self, rank: int, world: int) -> "Streams":
        """Streams rank, rank + world, ... (for DistributedDataParallel)."""
        pick = lambda t: t[rank::world]
        return Streams(pick(self.ids), pick(self.ident), pick(self.target_ids),
                       pick(self.target_ident), pick(self.mask))

    def chunk(self, i: int, bptt: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(ids, ident, target_ids, target_ident, mask) of columns [i * bptt, (i + 1) * bptt)."""
        sl = slice(i * bptt, (i + 1) * bptt)
        return (self.ids[:, sl], self.ident[:, sl], self.target_ids[:, sl],
                self.target_ident[:, sl], self.mask[:, sl])

    def chunks(self, bptt: int) -> Iterator[Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]]:
        """All chunks in order; the last one may be shorter."""
        for i in range(self.n_chunks(bptt)):
            yield self.chunk(i, bptt)

    def n_chunks(self, bptt: int) -> int:
        return -(-self.ids.shape[1] // bptt)


def make_streams(ids: Tensor, ident: Tensor, n_streams: int, pad: bool) -> Streams:
    """Cut a (N,) token stream into ``n_streams`` rows of inputs and next-token targets.

    pad=False: trim to equal rows (training); pad=True: pad the last row with ``<eos>`` (id and
    identity of ids[0]) and mask it out (evaluation: every target is scored once).
    """
    x, xi, y, yi = ids[:-1], ident[:-1], ids[1:], ident[1:]
    M = x.numel()
    mask = torch.ones(M, dtype=torch.bool)
    if pad:
        n = -(-M // n_streams)
        extra = n * n_streams - M
        padv = ids[:1].expand(extra)
        x, xi, y, yi = (torch.cat([t, padv]) for t in (x, xi, y, yi))
        mask = torch.cat([mask, torch.zeros(extra, dtype=torch.bool)])
    else:
        n = M // n_streams
        if n == 0:
            raise ValueError(f"{M} tokens are too few for {n_streams} streams of at least one")
    rows = lambda t: t[: n * n_streams].view(n_streams, n)
    return Streams(rows(x), rows(xi), rows(y), rows(yi), rows(mask))


def load_streams(path, vocab: Vocabulary, n_streams: int, pad: bool,
                 what: str = "a text") -> Streams:
    """Read a text file (one sentence per line) into streams; see ``make_streams``.

    A RescoreError naming the file when it holds no sentence, or (pad=False) too few tokens to
    give each of the ``n_streams`` streams one.
    """
    sentences = read_sentences(path)
    if not sentences:
        raise RescoreError(f"{what} with at least one sentence (one a line)", path=path,
                           got="no words")
    ids, ident = encode_corpus(sentences, vocab)
    try:
        return make_streams(ids, ident, n_streams, pad)
    except ValueError as e:
        raise RescoreError(f"{what} long enough for {n_streams} streams (fewer with a smaller "
                           "--batch-size)", path=path, got=str(e)) from None
