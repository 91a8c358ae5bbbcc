"""tests/fixtures/ecosystems/, made with the writers of tests/formats/ecosystem_writers.py (the
reproduced ESPnet, NeMo and icefall code, pyctcdecode's real beam search): ``make_all(root)``.
The tests read the committed files; tests/formats/test_ecosystems.py also checks that making them again
gives the same bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from tests.formats import ecosystem_writers as ew

# NeMo: a character CTC model's labels (blank first, as NeMo's vocabulary with the blank)
LABELS = ["", " ", "a", "d", "e", "h", "i", "o", "s", "t", "w"]


def _logprobs(frames):
    """Log-softmax rows from frames of {label: weight} (every other label gets 1e-4)."""
    rows = []
    for fr in frames:
        p = np.full(len(LABELS), 1e-4)
        for c, w in fr.items():
            p[LABELS.index(c)] = w
        rows.append(np.log(p / p.sum()))
    return np.array(rows, dtype=np.float32)


def _spell(text, alt=None):
    """Frames of ``text`` with a blank between letters; alt: {position: (label, weight)}."""
    frames = []
    for i, c in enumerate(text):
        fr = {c: 0.9}
        if alt and i in alt:
            fr = {c: 0.55, alt[i][0]: alt[i][1]}
        frames += [fr, {"": 0.9}]
    return frames


def nemo_logits():
    """Three utterances: two near readings; one so clear that pyctcdecode keeps fewer beams than
    the width (beam_prune_logp); silence (an empty hypothesis)."""
    return [
        _logprobs(_spell("who is it", alt={4: ("a", 0.3), 7: ("a", 0.45)})),  # "is"/"as", "it"/"at"
        _logprobs([{c: 0.999} if c else {"": 0.999} for c in "he was"] + [{"": 0.999}]),
        _logprobs([{"": 0.999}] * 4),
    ]


def make_nemo(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    manifest = [{"audio_filepath": f"audio/2277-149896-000{k}.wav", "duration": 1.0 + k, "text": t}
                for k, t in enumerate(["Who is it?", "He was.", ""])]
    (d / "test_manifest.json").write_text("".join(json.dumps(m) + "\n" for m in manifest))
    all_hyps = ew.nemo_pyctcdecode_nbest(nemo_logits(), LABELS, beam_width=3)
    ew.nemo_write_preds(d / ew.nemo_ctc_preds_name(3, 0.5, 1.0), all_hyps)
    # one recording cut into segments (offset), the same decode
    seg = [{"audio_filepath": "audio/2277-149896.wav", "offset": off, "duration": 1.0, "text": t}
           for off, t in ((0.0, "Who is it?"), (12.5, "He was."), (20.25, ""))]
    (d / "segments_manifest.json").write_text("".join(json.dumps(m) + "\n" for m in seg))
    # the transducer script's maes file, scores as str() of CUDA tensors
    hyps = [[ew.Candidate(h.text, ew.CudaScore(float(h.score))) for h in nb] for nb in all_hyps]
    ew.nemo_write_preds(d / ew.nemo_transducer_preds_name("maes", 3), hyps)


def espnet_jobs(token_type="word", with_text=True, gpu_job=True):
    import torch

    r = lambda words, x: ew.espnet_result(words, torch.tensor(x), token_type, with_text)  # noqa: E731
    g = lambda words, x: ew.espnet_result(words, ew.CudaScore(x) if gpu_job else torch.tensor(x),  # noqa: E731
                                          token_type, with_text)
    job1 = {"utt-a": [r("THE CAT SAT", -3.2071), r("THE CAT SAD", -4.0512), r("A CAT SAT", -5.5)],
            "utt-b": [r("A DOG", -2.5), r("A DOCK", -2.75)]}  # a list shorter than --nbest
    job2 = {"utt-c": [g("HELLO", -1.125), g("HELLO O", -1.875), g("", -9.0)]}  # an empty hypothesis
    return [job1, job2]


def make_espnet(d: Path) -> None:
    ew.espnet_decode(d / "decode_asr_nbest3" / "test_clean", espnet_jobs(), nbest=3)
    # no tokenizer (token only); BPE tokens
    ew.espnet_decode(d / "decode_bpe_notext" / "test_clean", espnet_jobs("bpe", with_text=False), nbest=3)
    ew.espnet_decode(d / "decode_char_notext" / "test_clean", espnet_jobs("char", with_text=False, gpu_job=False),
                     nbest=3)
    # enh_s2t_task: two speakers per utterance
    import torch

    r = lambda words, x: ew.espnet_result(words, torch.tensor(x))  # noqa: E731
    job = {"mix-1": [[r("HELLO THERE", -2.0), r("HELLO THEIR", -2.5)], [r("GOOD DAY", -1.5), r("GOOD DAYS", -3.0)]],
           "mix-2": [[r("YES", -0.5)], [r("NO", -0.75), r("KNOW", -1.0)]]}
    ew.espnet_decode(d / "decode_enh_nbest2" / "test", [job], nbest=2, enh_s2t_task=True)
    ew.espnet_decode(d / "decode_multi_nbest2" / "test", [job], nbest=2, num_spk=2)
    (d / "data" / "test_clean").mkdir(parents=True, exist_ok=True)
    (d / "data" / "test_clean" / "text").write_text("utt-a THE CAT SAT\nutt-b A DOG\nutt-c HELLO\n")


# icefall: one batch of two cuts; the paths as k2's Nbest.from_lattice leaves them (word ids,
# deduplicated by RaggedTensor.unique: in the order of their hash), after intersect(lattice)
WORDS = {1: "HE", 2: "HOPED", 3: "THERE", 4: "WOULD", 5: "BE", 6: "STEW", 7: "A", 8: "STUFF", 9: "IT",
         10: "INTO", 11: "YOU", 12: "STUFFED"}
ICEFALL_CUTS = [
    ("1089-134686-0000-0", "HE HOPED THERE WOULD BE STEW",
     [([1, 2, 3, 4, 5, 6], -120.5, -30.125), ([1, 2, 3, 4, 5, 7, 6], -123.25, -33.5),
      ([1, 2, 3, 4, 5, 6], -121.0, -30.125)]),  # a repeated word sequence (another alignment)
    ("1089-134686-0001-0", "STUFF IT INTO YOU",
     [([8, 9, 10, 11], -80.0, -20.0), ([12, 10, 11], -79.5, -22.75), ([8, 10, 11], -81.0, -19.5)]),
]


def icefall_k2_order():
    """Per cut {"hyps", "am_scores", "lm_scores"} in k2's deduplicated order."""
    out = []
    for _, _, paths in ICEFALL_CUTS:
        keep = ew.k2_unique_new2old([p[0] for p in paths])
        out.append({"hyps": [paths[i][0] for i in keep], "am_scores": [paths[i][1] for i in keep],
                    "lm_scores": [paths[i][2] for i in keep]})
    return out


def make_icefall(d: Path) -> None:
    from rescore.formats.icefall import write_nbest

    d.mkdir(parents=True, exist_ok=True)
    p = d / "nbest-test-clean.jsonl"
    with open(p, "w", encoding="utf-8") as f:
        write_nbest(icefall_k2_order(), [c for c, _, _ in ICEFALL_CUTS], WORDS, f,
                    refs=[r for _, r, _ in ICEFALL_CUTS])


def make_all(root: Path) -> None:
    for sub in ("espnet", "nemo", "icefall"):
        shutil.rmtree(root / sub, ignore_errors=True)
    make_espnet(root / "espnet")
    make_nemo(root / "nemo")
    make_icefall(root / "icefall")
