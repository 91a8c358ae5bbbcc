"""SpeechBrain's own beam search and rescorer builder for the tests (tests/io/test_speechbrain.py,
tests/integrations/test_speechbrain.py), and a tiny word LM of the words the searches can say.

SpeechBrain comes from PyPI at 1.1.2, the revision these tests name and were run with. Its
PyPI dependency torchaudio is built for CUDA torch and does not load beside this project's CPU
torch (``pip install speechbrain`` then fails at ``import speechbrain``), so install it without
its dependencies, with the few its decoders import::

    pip install --no-deps speechbrain==1.1.2 hyperpyyaml ruamel.yaml ruamel.yaml.clib scipy

Where torchaudio is absent or does not load, ``import speechbrain`` is given a placeholder
``torchaudio`` module that fails on any use: the code these tests run (``decoders.seq2seq``,
``decoders.scorer``, ``nnet.RNN``, ``nnet.linear``, ``utils.data_utils``) never calls torchaudio;
it is imported at start-up (``utils.torch_audio_backend`` checks its version; ``nnet.CNN`` uses it
only for a mel filter bank). Without speechbrain the tests that need it skip, saying so.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

INSTALL = "pip install --no-deps speechbrain==1.1.2 hyperpyyaml ruamel.yaml ruamel.yaml.clib scipy"
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran"]  # token i + 1 is WORDS[i]; 0 is <bos>/<eos>


class _AbsentTorchaudio(types.ModuleType):
    """torchaudio where it does not load: any use raises ImportError, saying why."""

    def __getattr__(self, name):
        if name.startswith("__"):  # (inspect and importlib probe dunder names)
            raise AttributeError(name)
        raise ImportError(f"torchaudio.{name}: torchaudio does not load beside this torch "
                          "(a placeholder of tests/speechbrain_searcher.py)")


def import_speechbrain():
    """The speechbrain package, or a pytest skip naming the install command. The placeholder
    torchaudio is in sys.modules only while speechbrain's modules import (they keep their own
    reference), so that other libraries' probes for torchaudio (transformers') find none."""
    placeholder = None
    if "speechbrain" not in sys.modules:
        try:
            import torchaudio  # noqa: F401
        except (ImportError, OSError):
            placeholder = sys.modules["torchaudio"] = _AbsentTorchaudio("torchaudio")
    try:
        import speechbrain
        import speechbrain.decoders.scorer  # noqa: F401
        import speechbrain.decoders.seq2seq  # noqa: F401
        import speechbrain.nnet.linear  # noqa: F401
        import speechbrain.nnet.RNN  # noqa: F401
        import speechbrain.utils.data_utils  # noqa: F401
    except ImportError as err:
        pytest.skip(f"speechbrain does not import ({err}); {INSTALL}")
    finally:
        if placeholder is not None and sys.modules.get("torchaudio") is placeholder:
            del sys.modules["torchaudio"]
    # speechbrain puts lazy modules in sys.modules (redirects of its old module names to its
    # integrations: k2, flair ...) that import on first attribute access; libraries that walk
    # sys.modules (hypothesis reads every module's __file__) would import them and fail. The
    # unloaded ones leave sys.modules.
    from speechbrain.utils.importutils import LazyModule  # (DeprecatedModuleRedirect is one too)

    for name, mod in list(sys.modules.items()):
        if isinstance(mod, LazyModule) and object.__getattribute__(mod, "__dict__").get("lazy_module") is None:
            del sys.modules[name]
    return speechbrain


def decode(ids) -> str:
    """The text of token ids (SpeechBrain's tokenizer.decode_ids for this word vocabulary)."""
    return " ".join(WORDS[i - 1] for i in ids)


def searcher(beam_size: int = 4, topk: int = 4, return_topk: bool = True, seed: int = 0):
    """A real S2SRNNBeamSearcher (attentional LSTM decoder, random weights scaled up so that the
    beams differ) over WORDS, bos = eos = 0, at most one step per encoder frame."""
    sb = import_speechbrain()
    import torch

    from speechbrain.decoders.seq2seq import S2SRNNBeamSearcher

    torch.manual_seed(seed)
    vocab = len(WORDS) + 1
    emb = torch.nn.Embedding(vocab, 6)
    dec = sb.nnet.RNN.AttentionalRNNDecoder("lstm", "content", 8, 1, 8, enc_dim=7, input_size=6)
    lin = sb.nnet.linear.Linear(n_neurons=vocab, input_size=8)
    for m in (emb, dec, lin):
        for p in m.parameters():
            torch.nn.init.normal_(p, std=1.0)
    return S2SRNNBeamSearcher(embedding=emb, decoder=dec, linear=lin, bos_index=0, eos_index=0,
                              min_decode_ratio=0.0, max_decode_ratio=1.0, beam_size=beam_size,
                              return_topk=return_topk, topk=topk).eval()


def ctc_searcher(beam_size: int = 8, topk: int = 4):
    """A real CTCBeamSearcher (no KenLM) over the tokens <blank> and "▁" + each of WORDS."""
    import_speechbrain()
    from speechbrain.decoders.ctc import CTCBeamSearcher

    return CTCBeamSearcher(blank_index=0, vocab_list=["<blank>"] + ["▁" + w for w in WORDS],
                           beam_size=beam_size, topk=topk, prune_history=False)


def ctc_log_probs(batch: int, frames: int = 10, seed: int = 1):
    """(log_probs (batch, frames, 1 + len(WORDS)), wav_lens (batch,)) of a random CTC output."""
    import torch

    torch.manual_seed(seed)
    return torch.randn(batch, frames, 1 + len(WORDS)).mul(2).log_softmax(-1), torch.ones(batch)


def encoder_states(batch: int, frames: int = 6, seed: int = 1):
    """(enc_states (batch, frames, 7), wav_lens (batch,)) of random 'audio'."""
    import torch

    torch.manual_seed(seed)
    return torch.rand(batch, frames, 7), torch.ones(batch)


def tiny_lm(path: Path, arch: str = "lstm") -> Path:
    """A small random word LM over WORDS (rescore's checkpoint), saved at ``path``."""
    import torch

    from rescore.models import ModelConfig, build_model, save_checkpoint
    from rescore.vocab import Vocabulary

    torch.manual_seed(0)
    config = ModelConfig(arch=arch, hidden=16, layers=1, dropout=0.0, n_heads=2, context=32)
    save_checkpoint(build_model(config, Vocabulary(["<eos>", "<unk>", *WORDS])), path)
    return path
