"""The writers of ESPnet, NeMo, icefall and k2, reproduced line by line from named upstream
revisions (tests/fixtures/ecosystems/README.md names them), to make test inputs in exactly the
layout those projects write; and pyctcdecode's real beam search (NeMo's CTC decoder). Run as a
script it rewrites tests/fixtures/ecosystems/ (``python -m tests.formats.ecosystem_writers`` from the repository root).

Only the writing is reproduced; the models are stand-ins (a score per hypothesis, tiny logits).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import List, Sequence, Union

# --------------------------------------------------------------------------------------------
# ESPnet: espnet2/fileio/datadir_writer.py at 214c50e7cf31b26f06d058f1f480f33266537254


class DatadirWriter:
    def __init__(self, p: Union[Path, str]):
        self.path = Path(p)
        self.chilidren = {}
        self.fd = None
        self.has_children = False
        self.keys = set()

    def __enter__(self):
        return self

    def __getitem__(self, key: str) -> "DatadirWriter":
        if self.fd is not None:
            raise RuntimeError("This writer points out a file")

        if key not in self.chilidren:
            w = DatadirWriter((self.path / key))
            self.chilidren[key] = w
            self.has_children = True

        retval = self.chilidren[key]
        return retval

    def __setitem__(self, key: str, value: str):
        if self.has_children:
            raise RuntimeError("This writer points out a directory")
        if key in self.keys:
            warnings.warn(f"Duplicated: {key}")

        if self.fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = self.path.open("w", encoding="utf-8")

        self.keys.add(key)
        self.fd.write(f"{key} {value}\n")

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def close(self):
        if self.has_children:
            prev_child = None
            for child in self.chilidren.values():
                child.close()
                if prev_child is not None and prev_child.keys != child.keys:
                    warnings.warn(
                        f"Ids are mismatching between "
                        f"{prev_child.path} and {child.path}"
                    )
                prev_child = child

        elif self.fd is not None:
            self.fd.close()


class Hyp:
    """A stand-in for ESPnet's Hypothesis: ``score`` is what str() is taken of (a torch tensor);
    ``scores``: the per-scorer scores (``hyp.scores``), {} as in a too-short utterance's."""

    def __init__(self, score, scores=None):
        self.score = score
        self.scores = scores or {}


def espnet_too_short(nbest: int):
    """asr_inference.py (02379a8c), ``inference()``, on TooShortUttError: the results written for
    an utterance too short to decode::

        hyp = Hypothesis(score=0.0, scores={}, states={}, yseq=[])
        results = [[" ", ["<space>"], [2], hyp]] * nbest
    """
    hyp = Hyp(0.0, {})
    return [[" ", ["<space>"], [2], hyp]] * nbest


class CudaScore:
    """str() of a 0-dim CUDA tensor, for machines without one: torch's str of the CPU tensor with
    the device suffix torch adds for a non-default device (``tensor(-1.1250, device='cuda:0')``)."""

    def __init__(self, value: float):
        import torch

        self.text = str(torch.tensor(value))[:-1] + ", device='cuda:0')"

    def __str__(self):
        return self.text


def espnet_write(writer: DatadirWriter, key: str, results, nbest: int, enh_s2t_task: bool = False,
                 per_scorer: bool = False) -> None:
    """espnet2/bin/asr_inference.py at 02379a8c9646303651bd5df4a1541b4d72871cd5, ``inference()``:
    the writing of one utterance's N-best list ``results`` [(text, token, token_int, hyp)] (per
    speaker with enh_s2t_task); per_scorer: with the two lines docs/ecosystems.md adds after the
    score (a ``score_<name>`` file per scorer of ``hyp.scores``)."""
    if enh_s2t_task:
        # Enh+ASR joint task
        for spk, ret in enumerate(results, 1):
            for n, (text, token, token_int, hyp) in zip(
                range(1, nbest + 1), ret
            ):
                # Create a directory: outdir/{n}best_recog_spk?
                ibest_writer = writer[f"{n}best_recog_spk{spk}"]

                # Write the result to each file
                ibest_writer["token"][key] = " ".join(token)
                ibest_writer["token_int"][key] = " ".join(map(str, token_int))
                ibest_writer["score"][key] = str(hyp.score)

                if text is not None:
                    ibest_writer["text"][key] = text

    else:

        # Normal ASR
        for n, (text, token, token_int, hyp) in zip(
            range(1, nbest + 1), results
        ):
            # Create a directory: outdir/{n}best_recog
            ibest_writer = writer[f"{n}best_recog"]

            # Write the result to each file
            ibest_writer["token"][key] = " ".join(token)
            ibest_writer["token_int"][key] = " ".join(map(str, token_int))
            ibest_writer["score"][key] = str(hyp.score)
            if per_scorer:
                for name, value in hyp.scores.items():  # one score_<name> file per scorer
                    ibest_writer[f"score_{name}"][key] = str(float(value))

            if text is not None:
                ibest_writer["text"][key] = text


def espnet_write_multi_asr(writer: DatadirWriter, key: str, results, nbest: int) -> None:
    """Multi-speaker ASR (``num_inf`` > 1): per speaker i, files ``token_spk{i}``,
    ``token_int_spk{i}``, ``score_spk{i}``, ``text_spk{i}`` in ``{n}best_recog``. NOT reproduced
    from asr_inference.py (that revision is not at hand): the names are those asr.sh at
    f48416ba0743fec8ca65fd0041ca2c750b09d346 merges and scores (``${f}${suffix}``, suffix
    ``_spk{i}``), the writing that of the single-speaker code above."""
    for spk, ret in enumerate(results, 1):
        for n, (text, token, token_int, hyp) in zip(range(1, nbest + 1), ret):
            ibest_writer = writer[f"{n}best_recog"]
            ibest_writer[f"token_spk{spk}"][key] = " ".join(token)
            ibest_writer[f"token_int_spk{spk}"][key] = " ".join(map(str, token_int))
            ibest_writer[f"score_spk{spk}"][key] = str(hyp.score)
            if text is not None:
                ibest_writer[f"text_spk{spk}"][key] = text


def asr_sh_merge(logdir: Path, out_dir: Path, nj: int, ref_text_files=("text",)) -> None:
    """egs2/TEMPLATE/asr1/asr.sh at f48416ba0743fec8ca65fd0041ca2c750b09d346, stage 12, "4.
    Concatenates the output files from each jobs" (``sort -k1`` in the C locale)::

        for ref_txt in ${ref_text_files[@]}; do
            suffix=$(echo ${ref_txt} | sed 's/text//')
            for f in token token_int score text; do
                if [ -f "${_logdir}/output.1/1best_recog/${f}${suffix}" ]; then
                    for i in $(seq "${_nj}"); do
                        cat "${_logdir}/output.${i}/1best_recog/${f}${suffix}"
                    done | sort -k1 >"${_dir}/${f}${suffix}"
    """
    for ref_txt in ref_text_files:
        suffix = ref_txt.replace("text", "", 1)
        for f in ("token", "token_int", "score", "text"):
            if (logdir / "output.1" / "1best_recog" / f"{f}{suffix}").is_file():
                lines = []
                for i in range(1, nj + 1):
                    lines += (logdir / f"output.{i}" / "1best_recog" / f"{f}{suffix}").read_text(
                        encoding="utf-8").splitlines(True)
                (out_dir / f"{f}{suffix}").write_text("".join(sorted(lines)), encoding="utf-8")


def espnet_decode(decode_dir: Path, jobs, nbest: int, enh_s2t_task: bool = False, num_spk: int = 0,
                  per_scorer: bool = False) -> None:
    """A decode dir as asr.sh leaves it: jobs = [{key: results}] (one per job, in order);
    num_spk: multi-speaker ASR's speakers (espnet_write_multi_asr); per_scorer: espnet_write's."""
    for j, job in enumerate(jobs, 1):
        with DatadirWriter(decode_dir / "logdir" / f"output.{j}") as writer:
            for key, results in job.items():
                if num_spk:
                    espnet_write_multi_asr(writer, key, results, nbest)
                else:
                    espnet_write(writer, key, results, nbest, enh_s2t_task, per_scorer)
    if not enh_s2t_task:
        refs = [f"text_spk{i}" for i in range(1, num_spk + 1)] if num_spk else ["text"]
        asr_sh_merge(decode_dir / "logdir", decode_dir, len(jobs), refs)


def espnet_result(words: str, score, token_type: str = "word", with_text: bool = True):
    """(text, token, token_int, hyp) as Speech2Text returns it: the tokens of ``words`` as the
    tokenizer of ``token_type`` makes them, and text None where there is no tokenizer."""
    if token_type == "bpe":
        token = [p for w in words.split() for p in ("\u2581" + w[:2], w[2:]) if p]
    elif token_type == "char":
        token = ["<space>" if c == " " else c for c in words]
    else:
        token = words.split()
    return (words if with_text else None, token, [7 + i for i in range(len(token))], Hyp(score))


# --------------------------------------------------------------------------------------------
# NeMo at 8cfedd7203462cb251a914e700e5605444277561


def nemo_ctc_preds_name(beam_width, beam_alpha, beam_beta) -> str:
    """eval_beamsearch_ngram_ctc.py, main()."""
    hp = {"beam_width": beam_width, "beam_alpha": beam_alpha, "beam_beta": beam_beta}
    return f"preds_out_width{hp['beam_width']}_alpha{hp['beam_alpha']}_beta{hp['beam_beta']}.tsv"


def nemo_transducer_preds_name(decoding_strategy, beam_width, maes_prefix_alpha=2, maes_expansion_gamma=2.3,
                               beam_alpha=None, kenlm_model_file=None, hat_subtract_ilm=False,
                               hat_ilm_weight=0.0) -> str:
    """eval_beamsearch_ngram_transducer.py, main()."""
    hp = {"beam_width": beam_width, "maes_prefix_alpha": maes_prefix_alpha,
          "maes_expansion_gamma": maes_expansion_gamma, "beam_alpha": beam_alpha, "hat_ilm_weight": hat_ilm_weight}
    results_file = f"preds_out_{decoding_strategy}_bw{hp['beam_width']}"
    if decoding_strategy == "maes":
        results_file = f"{results_file}_ma{hp['maes_prefix_alpha']}_mg{hp['maes_expansion_gamma']}"
        if kenlm_model_file:
            results_file = f"{results_file}_ba{hp['beam_alpha']}"
            if hat_subtract_ilm:
                results_file = f"{results_file}_hat_ilmw{hp['hat_ilm_weight']}"
    return f"{results_file}.tsv"


class Candidate:
    """rnnt_utils.Hypothesis's text and score."""

    def __init__(self, text, score):
        self.text, self.score = text, score


def nemo_pyctcdecode_nbest(logprobs_batch, labels, beam_width, beam_prune_logp=-10.0, token_min_logp=-5.0):
    """ctc_beam_decoding.py, BeamCTCInfer._pyctcdecode_beam_search (character model, no LM):
    pyctcdecode's decode_beams per sample; a candidate's text = candidate[0], score =
    candidate[4]."""
    import pyctcdecode

    pyctcdecode_beam_scorer = pyctcdecode.build_ctcdecoder(labels=labels, kenlm_model_path=None, alpha=None,
                                                           beta=None)
    beams_batch = []
    for logprobs in logprobs_batch:
        result = pyctcdecode_beam_scorer.decode_beams(
            logprobs,
            beam_width=beam_width,
            beam_prune_logp=beam_prune_logp,
            token_min_logp=token_min_logp,
            prune_history=False,
            hotwords=None,
            hotword_weight=10.0,
            lm_start_state=None,
        )  # Output format: text, last_lm_state, text_frames, logit_score, lm_score
        beams_batch.append(result)
    nbest_hypotheses = []
    for beams in beams_batch:
        hypotheses = []
        for candidate in beams:
            hypotheses.append(Candidate(candidate[0], candidate[4]))
        nbest_hypotheses.append(hypotheses)
    return nbest_hypotheses


def nemo_write_preds(preds_output_file, all_hyps, pred_text=lambda t: t) -> None:
    """eval_beamsearch_ngram_ctc.py, beam_search_eval(): the predictions file (pred_text: its
    apply_text_processing; the transducer script writes candidate.text as it is)."""
    out_file = open(preds_output_file, 'w', encoding='utf_8', newline='\n')
    for batch_idx, nbest_hyp in enumerate(all_hyps):
        for candidate_idx, candidate in enumerate(nbest_hyp):
            text = pred_text(candidate.text)
            score = candidate.score
            out_file.write('{}\t{}\n'.format(text, score))
    out_file.close()


def nemo_beam_scores_dataset(data_path, manifest_path, beam_size):
    """eval_neural_rescorer.py's BeamScoresDataset, what it reads of a predictions file and a
    manifest (pd.read_csv(data_path, delimiter="\\t", header=None): column 0 the text, 1 the
    score; the utterance of line idx is idx // beam_size; ground truths item['text'])."""
    rows = [line.split("\t") for line in Path(data_path).read_text(encoding="utf-8").splitlines()]
    ground_truths = [json.loads(x)["text"] for x in Path(manifest_path).read_text(encoding="utf-8").splitlines()]
    return [(text, float(score), ground_truths[idx // beam_size]) for idx, (text, score) in enumerate(rows)]


def nemo_script_stubs():
    """Stand-ins for the imports of eval_beamsearch_ngram_ctc.py and eval_beamsearch_ngram_transducer.py
    that beam_search_eval and decoding_step do not need here (NeMo, OmegaConf, scikit-learn,
    editdistance): {module name: module}."""
    import types

    from rapidfuzz.distance import Levenshtein

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    class Logging:
        CRITICAL = 50
        level = 20

        def getEffectiveLevel(self):
            return self.level

        def setLevel(self, level):
            self.level = level

        def info(self, *args, **kwargs):
            pass

        warning = info

    class Model:  # nemo_asr.models.ASRModel, EncDecHybridRNNTCTCModel
        pass

    asr_models = mod("nemo.collections.asr.models", ASRModel=Model, EncDecHybridRNNTCTCModel=Model)
    asr = mod("nemo.collections.asr", models=asr_models)
    collections = mod("nemo.collections", asr=asr)
    return {
        "editdistance": mod("editdistance", eval=lambda a, b: Levenshtein.distance(a, b)),
        "omegaconf": mod("omegaconf", MISSING="???", OmegaConf=None),
        "sklearn": mod("sklearn"), "sklearn.model_selection": mod("sklearn.model_selection", ParameterGrid=list),
        "nemo": mod("nemo", collections=collections), "nemo.collections": collections, "nemo.collections.asr": asr,
        "nemo.collections.asr.models": asr_models,
        "nemo.collections.asr.parts": mod("nemo.collections.asr.parts"),
        "nemo.collections.asr.parts.submodules": mod(
            "nemo.collections.asr.parts.submodules",
            ctc_beam_decoding=mod("ctc_beam_decoding", BeamCTCInferConfig=object),
            rnnt_beam_decoding=mod("rnnt_beam_decoding", BeamRNNTInferConfig=object)),
        "nemo.collections.asr.parts.utils": mod("nemo.collections.asr.parts.utils"),
        "nemo.collections.asr.parts.utils.transcribe_utils": mod(
            "nemo.collections.asr.parts.utils.transcribe_utils", PunctuationCapitalization=object,
            TextProcessingConfig=object),
        "nemo.core": mod("nemo.core"),
        "nemo.core.config": mod("nemo.core.config", hydra_runner=lambda **kw: (lambda f: f)),
        "nemo.utils": mod("nemo.utils", logging=Logging()),
    }


def nemo_ctc_beam_search_eval(script: Path, all_hyps, targets: Sequence[str], preds_output_file: Path,
                              beam_width: int) -> None:
    """Run ``beam_search_eval`` of the real eval_beamsearch_ngram_ctc.py ``script`` (upstream, or
    patched) on candidates ``all_hyps`` (nemo_pyctcdecode_nbest: what ``model.transcribe`` returns
    with ``return_best_hypothesis=False``), its heavy imports stubbed (nemo_script_stubs)."""
    import importlib.util
    import sys
    from types import SimpleNamespace
    from unittest import mock

    class Model:
        cfg = SimpleNamespace(decoding=SimpleNamespace())

        def change_decoding_strategy(self, *args, **kwargs):
            pass

        def transcribe(self, audio_filepaths, batch_size):
            return all_hyps

    with mock.patch.dict(sys.modules, nemo_script_stubs()):
        spec = importlib.util.spec_from_file_location("eval_beamsearch_ngram_ctc", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cfg = SimpleNamespace(decoding=SimpleNamespace(), kenlm_model_file=None, decoding_strategy="beam",
                              batch_size=16, text_processing=SimpleNamespace(
                                  do_lowercase=False, rm_punctuation=False, separate_punctuation=False))
        module.beam_search_eval([f"{k}.wav" for k in range(len(targets))], Model(), cfg, list(targets),
                                preds_output_file=str(preds_output_file), lm_path=None, beam_width=beam_width)


def nemo_transducer_decoding_step(script: Path, all_hyps, targets: Sequence[str], preds_output_file: Path,
                                  strategy: str = "maes", beam_batch_size: int = 2) -> None:
    """Run ``decoding_step`` of the real eval_beamsearch_ngram_transducer.py ``script`` (upstream,
    or patched) with candidates ``all_hyps`` (per utterance, what the model's
    ``rnnt_decoder_predictions_tensor(..., return_hypotheses=True)`` returns), on stand-in
    log-probabilities of one frame per utterance, in batches of beam_batch_size; heavy imports
    stubbed (nemo_script_stubs)."""
    import importlib.machinery
    import importlib.util
    import sys
    from types import SimpleNamespace
    from unittest import mock

    import torch

    batches = iter([all_hyps[i:i + beam_batch_size] for i in range(0, len(all_hyps), beam_batch_size)])

    class Model:
        cfg = SimpleNamespace(decoding=SimpleNamespace())
        decoding = SimpleNamespace(
            rnnt_decoder_predictions_tensor=lambda packed, lens, return_hypotheses: next(batches))

        def change_decoding_strategy(self, *args, **kwargs):
            pass

    with mock.patch.dict(sys.modules, nemo_script_stubs()):
        loader = importlib.machinery.SourceFileLoader("eval_beamsearch_ngram_transducer", str(script))
        spec = importlib.util.spec_from_file_location("eval_beamsearch_ngram_transducer", script, loader=loader)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cfg = SimpleNamespace(decoding=SimpleNamespace(hat_ilm_weight=0.0), hat_subtract_ilm=False,
                              kenlm_model_file=None, decoding_strategy=strategy)
        all_probs = [torch.zeros(4, 1) for _ in targets]  # (C, T) per utterance
        module.decoding_step(Model(), cfg, all_probs, list(targets), preds_output_file=str(preds_output_file),
                             beam_batch_size=beam_batch_size, progress_bar=False)


# --------------------------------------------------------------------------------------------
# k2 at a741ae88abc6995345aa166464a239b7d270dd4c: the order of Nbest.from_lattice's paths


def k2_hash(seq: Sequence[int]) -> int:
    """ComputeHash<int64_t> of one sequence on the CPU (k2/csrc/ragged_ops.cu), int64 wrap-around."""
    def wrap(x):
        return (x + 2 ** 63) % 2 ** 64 - 2 ** 63

    hash1, hash2 = 13, 787
    for elem in seq:
        hash1 = wrap(31 * hash1 + elem)
        hash2 = wrap(167 * hash2 + elem)
    return wrap(hash1 + 104729 * hash2)


def k2_unique_new2old(word_seqs: Sequence[Sequence[int]]) -> List[int]:
    """UniqueSequences' new2old of one utterance's paths: sorted by hash (SortSublists with
    LessThan), the first of each run of equal hashes kept (ties of equal sequences: which path
    is kept is an implementation detail; here the first)."""
    order = sorted(range(len(word_seqs)), key=lambda i: k2_hash(word_seqs[i]))
    return [i for k, i in enumerate(order) if k == 0 or k2_hash(word_seqs[i]) != k2_hash(word_seqs[order[k - 1]])]


# --------------------------------------------------------------------------------------------
# icefall at 36e0420c7e3e849a25b3d24dbf913c424f3d23c9: icefall/utils.py (kaldialign: the real one)


def icefall_beam_search_stubs():
    """Stand-ins for the imports of icefall's beam_search.py (36e0420c) that modified_beam_search
    does not need, and for the few k2 ragged operations it does (create_ragged_shape2, row_ids,
    row_splits, RaggedTensor rows): {module name: module}."""
    import types

    import torch

    class Placeholder:  # any name used only in annotations or other functions
        def __init__(self, *args, **kwargs):
            pass

    class Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Placeholder

    def mod(name, **attrs):
        m = Module(name)
        m.__dict__.update(attrs)
        return m

    class RaggedShape:
        def __init__(self, row_splits):
            self.splits = torch.as_tensor(row_splits, dtype=torch.int64)

        def row_splits(self, axis):
            return self.splits

        def row_ids(self, axis):
            return torch.repeat_interleave(torch.arange(len(self.splits) - 1), self.splits[1:] - self.splits[:-1])

        def to(self, device):
            return self

    class RaggedTensor:
        def __init__(self, shape, value):
            self.shape, self.value = shape, value

        def __getitem__(self, i):  # a row of a 2-axis ragged tensor: a 1-D torch tensor
            return self.value[self.shape.splits[i]:self.shape.splits[i + 1]]

    ragged = mod("k2.ragged", create_ragged_shape2=lambda row_splits, cached_tot_size=None: RaggedShape(row_splits))
    k2 = mod("k2", ragged=ragged, RaggedTensor=RaggedTensor, RaggedShape=RaggedShape)
    names = ["sentencepiece", "icefall", "icefall.decode", "icefall.lm_wrapper", "icefall.rnn_lm",
             "icefall.rnn_lm.model", "icefall.transformer_lm", "icefall.transformer_lm.model", "icefall.utils"]
    return {"k2": k2, "k2.ragged": ragged, **{n: mod(n) for n in names}}


def icefall_beam_search_module(path: Path):
    """icefall's beam_search.py at ``path`` (upstream, or patched), imported with its heavy imports
    stubbed (icefall_beam_search_stubs)."""
    import importlib.machinery
    import importlib.util
    import sys
    from unittest import mock

    with mock.patch.dict(sys.modules, icefall_beam_search_stubs()):
        loader = importlib.machinery.SourceFileLoader("icefall_beam_search", str(path))  # (any file name)
        spec = importlib.util.spec_from_file_location("icefall_beam_search", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def icefall_tiny_transducer(vocab_size: int = 6, dim: int = 8, context_size: int = 2, seed: int = 0):
    """A transducer of random weights with the interface modified_beam_search uses
    (decoder.blank_id, decoder.context_size, decoder(y, need_pad=False), joiner.encoder_proj,
    joiner.decoder_proj, joiner(enc, dec, project_input=False)); blank is 0."""
    import torch
    from torch import nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.blank_id, self.context_size = 0, context_size
            self.embedding = nn.Embedding(vocab_size, dim)

        def forward(self, y, need_pad=True):  # (N, context_size) -> (N, 1, dim); -1 pads the context
            emb = self.embedding(y.clamp(min=0)) * (y >= 0).unsqueeze(-1)
            return emb.sum(dim=1, keepdim=True)

    class Joiner(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder_proj, self.decoder_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
            self.output_linear = nn.Linear(dim, vocab_size)

        def forward(self, enc, dec, project_input=True):
            return self.output_linear(torch.tanh(enc + dec))

    torch.manual_seed(seed)
    model = nn.Module()
    model.decoder, model.joiner = Decoder(), Joiner()
    return model.eval()


def icefall_store_transcripts(filename, texts, char_level: bool = False) -> None:
    with open(filename, "w", encoding="utf8") as f:
        for cut_id, ref, hyp in texts:
            if char_level:
                ref = list("".join(ref))
                hyp = list("".join(hyp))
            print(f"{cut_id}:\tref={ref}", file=f)
            print(f"{cut_id}:\thyp={hyp}", file=f)


def icefall_write_error_stats(f, test_set_name, results, enable_log=True, compute_CER=False, sclite_mode=False):
    from collections import defaultdict

    import kaldialign

    subs = defaultdict(int)
    ins = defaultdict(int)
    dels = defaultdict(int)
    words = defaultdict(lambda: [0, 0, 0, 0, 0])
    num_corr = 0
    ERR = "*"
    if compute_CER:
        for i, res in enumerate(results):
            cut_id, ref, hyp = res
            ref = list("".join(ref))
            hyp = list("".join(hyp))
            results[i] = (cut_id, ref, hyp)
    for cut_id, ref, hyp in results:
        ali = kaldialign.align(ref, hyp, ERR, sclite_mode=sclite_mode)
        for ref_word, hyp_word in ali:
            if ref_word == ERR:
                ins[hyp_word] += 1
                words[hyp_word][3] += 1
            elif hyp_word == ERR:
                dels[ref_word] += 1
                words[ref_word][4] += 1
            elif hyp_word != ref_word:
                subs[(ref_word, hyp_word)] += 1
                words[ref_word][1] += 1
                words[hyp_word][2] += 1
            else:
                words[ref_word][0] += 1
                num_corr += 1
    ref_len = sum([len(r) for _, r, _ in results])
    sub_errs = sum(subs.values())
    ins_errs = sum(ins.values())
    del_errs = sum(dels.values())
    tot_errs = sub_errs + ins_errs + del_errs
    tot_err_rate = "%.2f" % (100.0 * tot_errs / ref_len)
    print(f"%WER = {tot_err_rate}", file=f)
    print(
        f"Errors: {ins_errs} insertions, {del_errs} deletions, "
        f"{sub_errs} substitutions, over {ref_len} reference "
        f"words ({num_corr} correct)",
        file=f,
    )
    print(
        "Search below for sections starting with PER-UTT DETAILS:, "
        "SUBSTITUTIONS:, DELETIONS:, INSERTIONS:, PER-WORD STATS:",
        file=f,
    )
    print("", file=f)
    print("PER-UTT DETAILS: corr or (ref->hyp)  ", file=f)
    for cut_id, ref, hyp in results:
        ali = kaldialign.align(ref, hyp, ERR)
        combine_successive_errors = True
        if combine_successive_errors:
            ali = [[[x], [y]] for x, y in ali]
            for i in range(len(ali) - 1):
                if ali[i][0] != ali[i][1] and ali[i + 1][0] != ali[i + 1][1]:
                    ali[i + 1][0] = ali[i][0] + ali[i + 1][0]
                    ali[i + 1][1] = ali[i][1] + ali[i + 1][1]
                    ali[i] = [[], []]
            ali = [
                [
                    list(filter(lambda a: a != ERR, x)),
                    list(filter(lambda a: a != ERR, y)),
                ]
                for x, y in ali
            ]
            ali = list(filter(lambda x: x != [[], []], ali))
            ali = [
                [
                    ERR if x == [] else " ".join(x),
                    ERR if y == [] else " ".join(y),
                ]
                for x, y in ali
            ]
        print(
            f"{cut_id}:\t"
            + " ".join(
                (
                    ref_word if ref_word == hyp_word else f"({ref_word}->{hyp_word})"
                    for ref_word, hyp_word in ali
                )
            ),
            file=f,
        )
    print("", file=f)
    print("SUBSTITUTIONS: count ref -> hyp", file=f)
    for count, (ref, hyp) in sorted([(v, k) for k, v in subs.items()], reverse=True):
        print(f"{count}   {ref} -> {hyp}", file=f)
    print("", file=f)
    print("DELETIONS: count ref", file=f)
    for count, ref in sorted([(v, k) for k, v in dels.items()], reverse=True):
        print(f"{count}   {ref}", file=f)
    print("", file=f)
    print("INSERTIONS: count hyp", file=f)
    for count, hyp in sorted([(v, k) for k, v in ins.items()], reverse=True):
        print(f"{count}   {hyp}", file=f)
    print("", file=f)
    print("PER-WORD STATS: word  corr tot_errs count_in_ref count_in_hyp", file=f)
    for _, word, counts in sorted(
        [(sum(v[1:]), k, v) for k, v in words.items()], reverse=True
    ):
        (corr, ref_sub, hyp_sub, ins, dels) = counts
        tot_errs = ref_sub + hyp_sub + ins + dels
        ref_count = corr + ref_sub + dels
        hyp_count = corr + hyp_sub + ins
        print(f"{word}   {corr} {tot_errs} {ref_count} {hyp_count}", file=f)
    return float(tot_err_rate)


def icefall_read_recogs(path) -> dict:
    """cut_id -> (ref, hyp) of a recogs-*.txt (the two lines store_transcripts prints)."""
    import ast

    out = {}
    for line in Path(path).read_text(encoding="utf8").splitlines():
        cut_id, _, rest = line.partition(":\t")
        side, _, value = rest.partition("=")
        out.setdefault(cut_id, {})[side] = ast.literal_eval(value)
    return {k: (v["ref"], v["hyp"]) for k, v in out.items()}


if __name__ == "__main__":
    from tests.formats.ecosystem_fixtures import make_all

    make_all(Path(os.environ.get("FIXTURES", Path(__file__).resolve().parents[1] / "fixtures" / "ecosystems")))
