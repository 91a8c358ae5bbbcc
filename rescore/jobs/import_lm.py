"""The jobs of the model import commands: rescore-import-lm (:class:`ImportLmJob`, a pretrained
causal LM as a directory ``--model hf:DIR`` reads: rescore.models.hf_import) and
rescore-import-kaldi-lm (:class:`ImportKaldiLmJob`, a model of Kaldi's steps/pytorchnn as a
rescore checkpoint: rescore.models.kaldi_lm).

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) before any work. The
importers import torch, so they are imported when a job runs: this module stays torch-free, and
the commands' ``--help`` and option checks instant. No code from a model is run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rescore.errors import check
from rescore.io.outputs import check_output_dir
from rescore.settings import IMPORT_DTYPES, KALDI_MODEL_TYPES


@dataclass(frozen=True)
class ImportLmJob:
    """rescore-import-lm: ``source`` (a GGUF file, a directory holding one, or a local
    from_pretrained directory) written to ``out_dir``: safetensors weights, the tokenizer with the
    chosen sentence-boundary tokens, and the record of the import. Checked when built."""

    source: str
    out_dir: str
    bos: Optional[str] = None  # token that starts a conversation's stream; None: chosen from the vocabulary
    eos: Optional[str] = None  # end-of-sentence token; None: the vocabulary's plain document boundary
    dtype: str = "float32"  # of the weights written (rescore loads them as float32)

    def __post_init__(self):
        check(self.dtype in IMPORT_DTYPES, f"one of {', '.join(IMPORT_DTYPES)}", "--dtype", self.dtype)

    def run(self) -> dict:
        """Import; returns the record written (rescore.models.hf_import.import_lm's)."""
        from rescore.models.hf_import import import_lm  # (lazy: torch, when the job runs)

        return import_lm(self.source, self.out_dir, bos=self.bos, eos=self.eos, dtype=self.dtype)


@dataclass(frozen=True)
class ImportKaldiLmJob:
    """rescore-import-kaldi-lm: ``model`` (the state_dict Kaldi's steps/pytorchnn/train.py saves)
    and ``vocab`` (its words.txt) as ``out_dir``/model.pt, a checkpoint that gives the per-sentence
    costs of Kaldi's compute_sentence_scores.py. The shape options are Kaldi's (checked against
    the state_dict by the importer). Checked when built."""

    model: str
    vocab: str
    out_dir: str
    model_type: str  # LSTM, GRU or Transformer (train.py --model)
    embedding_dim: int  # train.py --emsize
    hidden_dim: int  # train.py --nhid (a Transformer's feed-forward size)
    nlayers: int
    nhead: int = 2  # Transformer attention heads
    tied: bool = False  # trained with --tied: its input and output weights are checked equal
    oov: str = "<unk>"  # Kaldi's OOV symbol
    sent_boundary: str = "<s>"  # Kaldi's sentence boundary symbol
    context: int = 200  # Transformer: attention window in tokens

    def __post_init__(self):
        check_output_dir(self.out_dir, "OUT_DIR", names=["model.pt"], inputs=[self.model, self.vocab])
        check(self.model_type in KALDI_MODEL_TYPES, f"one of {', '.join(KALDI_MODEL_TYPES)}", "--model-type",
              self.model_type)

    def run(self) -> Path:
        """Import; returns the checkpoint written."""
        from rescore.models.kaldi_lm import import_kaldi_lm  # (lazy: torch, when the job runs)

        out = Path(self.out_dir) / "model.pt"
        import_kaldi_lm(self.model, self.vocab, out, model_type=self.model_type, embedding_dim=self.embedding_dim,
                        hidden_dim=self.hidden_dim, nlayers=self.nlayers, nhead=self.nhead, tied=self.tied,
                        oov=self.oov, sent_boundary=self.sent_boundary, context=self.context)
        logging.getLogger("rescore-import-kaldi-lm").info("wrote %s/model.pt", self.out_dir)
        return out
