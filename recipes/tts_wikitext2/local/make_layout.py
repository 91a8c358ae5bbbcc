#!/usr/bin/env python3
"""The benchmark's layout from the recipe's stages: OUT_DIR/{data,nbest,lang,extra}, stats.json.

* ``data/``: ``text``, ``utt2spk``, ``spk2utt``, ``segments``, ``utt2dur``, ``utt2cond`` of the
  speech (rescore-tts-data), ``utt2sentidx`` (``<utt> valid <article> <line>``: where the
  sentence is in TEXT_DIR/valid.txt, 0-based) and ``reco2docid`` (``<reco> valid <article>``);
* ``nbest/``: ``words_text``, ``acwt``, ``lmwt.withlm``, ``lmwt.nolm`` of the decoding
  (rescore-make-nbest), and ``words``: the same entries as ids of ``lang/words.txt``;
* ``lang/words.txt``: ``<eps>`` 0, the sorted union of the normalized WikiText-2
  train/valid/test words and the set's N-best and reference words, then ``<s>``, ``</s>``, ``#0``;
* ``extra/ps_1best.txt``: PocketSphinx's own 1-best (``hyp()``), normalized;
* ``stats.json``: counts, ``inv_acwt`` 9.5 and ``wip`` 0 (the decoder's weights in Kaldi terms).

Usage: make_layout.py TEXT_DIR SELECT_DIR TTS_DIR DECODE_DIR OUT_DIR
"""

import json
import shutil
import sys
from pathlib import Path

from rescore.asr.pocketsphinx_nbest import symbol_table


def rows(path):
    if not path.is_file():
        sys.exit(f"error: {path}: expected the file an earlier stage writes, got no such file")
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(" ".join(r) + "\n" for r in lines), encoding="utf-8")


def main(argv):
    if len(argv) != 5:
        sys.exit("usage: make_layout.py TEXT_DIR SELECT_DIR TTS_DIR DECODE_DIR OUT_DIR")
    text_dir, select_dir, tts_dir, decode_dir, out = (Path(a) for a in argv)
    out.mkdir(parents=True, exist_ok=True)

    # data/: the speech's tables, and where each sentence came from. Utterance ids sort in
    # selection order (articles, then sentences, numbered from 000).
    for name in ("text", "utt2spk", "spk2utt", "segments", "utt2dur", "utt2cond"):
        (out / "data").mkdir(exist_ok=True)
        shutil.copyfile(tts_dir / name, out / "data" / name)
    text = rows(out / "data" / "text")
    sentidx = rows(select_dir / "sentidx")
    selected = rows(select_dir / "text")
    if len(text) != len(sentidx) or [r[1:] for r in text] != selected:
        sys.exit(f"error: {tts_dir / 'text'}: expected the {len(selected)} sentences of {select_dir / 'text'} "
                 f"in order, got {len(text)} that differ")
    write(out / "data" / "utt2sentidx", ([r[0]] + s for r, s in zip(text, sentidx)))
    recos = {}
    for r in rows(out / "data" / "segments"):
        recos.setdefault(r[1], r[0])
    utt_doc = {r[0]: s[1] for r, s in zip(text, sentidx)}
    write(out / "data" / "reco2docid", ([reco, "valid", utt_doc[utt]] for reco, utt in sorted(recos.items())))

    # nbest/: the archives, words as ids of lang/words.txt.
    words_text = rows(decode_dir / "words_text")
    lm_words = (w for split in ("train", "valid", "test") for line in rows(text_dir / f"{split}.txt") for w in line)
    symbols = symbol_table(lm_words, (w for r in words_text for w in r[1:]), (w for r in text for w in r[1:]))
    ids = {w: i for i, w in enumerate(symbols)}
    write(out / "lang" / "words.txt", ([w, str(i)] for i, w in enumerate(symbols)))
    (out / "nbest").mkdir(exist_ok=True)
    for name in ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm"):
        shutil.copyfile(decode_dir / name, out / "nbest" / name)
    write(out / "nbest" / "words", ([r[0]] + [str(ids[w]) for w in r[1:]] for r in words_text))
    (out / "extra").mkdir(exist_ok=True)
    shutil.copyfile(decode_dir / "ps_1best.txt", out / "extra" / "ps_1best.txt")

    utts = {r[0] for r in text}
    dur = sum(float(r[1]) for r in rows(out / "data" / "utt2dur"))
    stats = {
        "set": "dev", "split": "valid", "utts": len(utts), "spk": len(rows(out / "data" / "spk2utt")),
        "recos": len(recos), "ref_words": sum(len(r) - 1 for r in text), "audio_s": round(dur, 3),
        "n_hyps": len(words_text), "mean_n": len(words_text) / len(utts), "vocab": len(symbols),
        "inv_acwt": 9.5, "wip": 0.0,
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(f"{out}: {stats['utts']} utterances of {stats['recos']} articles, {stats['n_hyps']} N-best entries, "
          f"{stats['vocab']} symbols", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
