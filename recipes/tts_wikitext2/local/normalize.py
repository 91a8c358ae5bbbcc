#!/usr/bin/env python3
"""WikiText-2 (tokenized) -> ASR-style text: the LM text of the tts-wikitext2-dev benchmark.

Reads WikiText-2's ``train.txt``, ``valid.txt`` and ``test.txt`` (the tokenized release, as in
pytorch/examples ``word_language_model/data/wikitext-2``; the release's own names
``wiki.train.tokens``, ``wiki.valid.tokens``, ``wiki.test.tokens`` are read too) and writes, per
split, to OUT_DIR:

* ``<split>.txt``: one sentence a line, lowercase words, no punctuation, numbers spelled out;
* ``<split>.docids``: the article index (0-based, per split) of each line;
* ``<split>.titles``: ``<index>\\t<title>`` of each article, the title as WikiText-2 writes it.

The rules, in order:

* `` = Title = `` lines start an article; other heading lines (`` = = Section = = ``) are dropped.
* `` @,@ ``, `` @.@ `` and `` @-@ `` join what they stand between (``1 @,@ 000`` -> ``1,000``,
  ``M @-@ 82`` -> ``M-82``).
* A token that starts with an apostrophe and a letter (``'s``, ``'t``, ``'m``) joins the token
  before it: ``don 't`` -> ``don't``.
* Sentences end at a stand-alone ``.``, ``?``, ``!``, ``...`` or ``…``.
* Per token: ``<unk>`` (with a clitic too: ``<unk>'s``) stays ``<unk>``; a currency sign before a
  number goes after it and its scale word (``$ 2.5 million`` -> ``two point five million
  dollars``; before anything else it is dropped); abbreviations and symbols of ABBREV are
  expanded (``Dr.`` -> ``doctor``, ``U.S.`` -> ``u s``, ``%`` -> ``percent``); ``No.`` before a
  number is ``number``; numbers are spelled out with num2words: four-digit numbers 1100-2099
  written without a comma as years (``1938`` -> ``nineteen thirty eight``), others as cardinals
  (``1,500`` -> ``one thousand five hundred``), numbers with a leading zero digit by digit
  (``09`` -> ``zero nine``), decimals with ``point`` and their digits one by one, ordinals
  (``21st``), plurals of numbers (``1990s``, ``2001's`` -> ``nineteen nineties``, ``two thousand
  and ones``); a comma list that is no thousands grouping is several numbers (``1,3`` -> ``one
  three``).  Lowercase words of letters (inner apostrophes kept) stay as they are.
* Any other token (token_words): split at hyphens, each part as above (``M-82`` -> ``m eighty
  two``, ``delta-v.`` -> ``delta versus``); then at punctuation, keeping ``<unk>`` whole except
  in a part joined by a comma or full stop (``16,<unk>`` -> ``sixteen unk``, as the benchmark's
  text has it); letters and digits run together are split (``km2`` -> ``km two``, ``U2's`` -> ``u
  two s``).

With num2words 0.5.14 this gives wikitext2-asr's train, valid and test files (text, docids and
titles) byte for byte.

Usage: normalize.py WIKITEXT_DIR OUT_DIR
"""

import re
import sys
from pathlib import Path

from num2words import num2words

SPLITS = ("train", "valid", "test")
TITLE = re.compile(r"^ = (?!= )(.*) = $")  # an article's title line; sections are ' = = ... = = '
HEADING = re.compile(r"^ (= )+.*(= )+$")  # ' = = Section = = ' (a line ' = text ' is text)
SENTENCE_END = {".", "?", "!", "...", "…"}
ABBREV = {
    "dr.": "doctor", "mr.": "mister", "mrs.": "missus", "ms.": "miss", "ms": "miss", "st.": "saint",
    "jr.": "junior", "sr.": "senior", "bros.": "brothers", "co.": "company", "inc.": "incorporated",
    "ltd.": "limited", "gen.": "general", "rev.": "reverend", "op.": "opus", "nr.": "number",
    "nos.": "numbers", "sgt.": "sergeant", "lt.": "lieutenant", "col.": "colonel",
    "u.s.": "u s", "v.": "versus", "vs.": "versus", "e.g.": "for example", "i.e.": "that is",
    "&": "and", "+": "plus", "%": "percent", "°": "degrees", "²": "squared", "³": "three",
    "×": "by", "#": "number",
}
CURRENCY = {"$": "dollars", "£": "pounds", "€": "euros", "¥": "yen", "₹": "rupees"}
SCALES = {"thousand", "million", "billion", "trillion"}
NUMBER = re.compile(r"^(?:\d+(?:[,.]\d+)*|\.\d+)$")
GROUPED = re.compile(r"^\d{1,3}(?:,\d{3})+$")  # 1,000,000: one number
ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
PLURAL = re.compile(r"^(\d+)'?s$")  # 1990s, 2001's (case-sensitive: 2S is "two s")
CLITIC = re.compile(r"^'[^\W\d_]")
WORD = re.compile(r"^[^\W\d_]+(?:'[^\W\d_]+)*$")
# The parts of any other token, split at hyphens first: what lies between punctuation (a comma or
# full stop only where no digits stand on both sides of it), and <unk>, except that in a part
# joined by a comma or full stop (16,<unk>, <unk>.5: numbers with an unknown piece) its brackets
# are punctuation too.
PART = re.compile(r"(<unk>)|[^\w',.<>]+|[<>]|(?<!\d)[,.]|[,.](?!\d)")
PART_OF_NUMBER = re.compile(r"[^\w',.]+|(?<!\d)[,.]|[,.](?!\d)")
RUN = re.compile(r"[^\W\d_]+|\d+(?:[,.]\d+)*")  # letters, or a number


def spoken(text):
    """num2words' text as words: 'twenty-four' -> ['twenty', 'four']."""
    return text.replace("-", " ").replace(",", " ").split()


def digits(s):
    return [spoken(num2words(int(d)))[0] for d in s]


def integer(s, year=True):
    if len(s) > 1 and s.startswith("0"):
        return digits(s)
    v = int(s)
    if year and len(s) == 4 and 1100 <= v <= 2099:
        return spoken(num2words(v, to="year"))
    return spoken(num2words(v))


def number(s):
    """Words of a number token: 7, 1938, 1,500, 0.7, .69, 1,3."""
    if "," in s and not GROUPED.match(s.split(".")[0]):
        return [w for part in s.split(",") if part for w in number(part)]
    if "." in s:
        whole, frac = s.replace(",", "").split(".", 1)
        if "." in frac:  # 1.2.3: a version, not a decimal
            return [w for part in s.split(".") if part for w in integer(part)]
        return (integer(whole, year=False) if whole else []) + ["point"] + digits(frac)
    if "," in s:
        return spoken(num2words(int(s.replace(",", ""))))
    return integer(s)


def plural(words):
    last = words[-1]
    if last.endswith("y"):
        words[-1] = last[:-1] + "ies"
    elif last.endswith("x"):
        words[-1] = last + "es"
    else:
        words[-1] = last + "s"
    return words


def tokens(line):
    """A WikiText-2 line's tokens, numbers joined and clitics re-attached."""
    line = re.sub(r" @([,.-])@ ", r"\1", line)
    out = []
    for t in line.split():
        if CLITIC.match(t) and out and out[-1] not in SENTENCE_END:
            out[-1] += t
        else:
            out.append(t)
    return out


def token_words(raw):
    """The words of one token that is no currency sign, abbreviation or plain <unk>."""
    t = raw.lower()
    if NUMBER.match(t):
        return number(t)
    if ORDINAL.match(t):
        return spoken(num2words(int(ORDINAL.match(t).group(1)), to="ordinal"))
    if PLURAL.match(raw):
        return plural(integer(PLURAL.match(raw).group(1)))
    if WORD.match(t):
        return [t]
    if "-" in raw.strip("-"):
        return [w for p in raw.split("-") if p for w in (
            ["<unk>"] if p == "<unk>" else ABBREV[p.lower()].split() if p.lower() in ABBREV else token_words(p))]
    parts = [p for p in (PART_OF_NUMBER if re.search(r"[,.]", raw) else PART).split(raw) if p]
    if len(parts) == 1 and parts[0] == raw:  # letters and digits run together: km2, 3D's
        return [w for r in RUN.findall(t) for w in (number(r) if r[0].isdigit() else [r])]
    return [w for p in parts if p.strip("'") for w in (["<unk>"] if p == "<unk>" else token_words(p.strip("'")))]


def words_of(toks):
    """The normalized words of one sentence's tokens."""
    out = []
    i = 0
    while i < len(toks):
        raw = toks[i]
        t = raw.lower()
        i += 1
        if t in CURRENCY:
            if i < len(toks) and NUMBER.match(toks[i]):
                out += number(toks[i])
                i += 1
                if i < len(toks) and toks[i].lower() in SCALES:
                    out.append(toks[i].lower())
                    i += 1
                out.append(CURRENCY[t])
            continue
        if t == "<unk>" or (t.startswith("<unk>'") and WORD.match("x" + t[5:])):
            out.append("<unk>")
        elif t in ABBREV:
            out += ABBREV[t].split()
        elif t == "no." and i < len(toks) and NUMBER.match(toks[i]):
            out.append("number")
        else:
            out += token_words(raw)
    return out


def normalize(src):
    """(sentences, doc ids, titles) of one WikiText-2 file."""
    sentences, docids, titles = [], [], []
    doc = -1
    with open(src, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = TITLE.match(line)
            if m:
                doc += 1
                titles.append(f"{doc}\t{m.group(1)}")
                continue
            if not line.strip() or HEADING.match(line):
                continue
            sent = []
            for t in tokens(line) + ["."]:
                if t not in SENTENCE_END:
                    sent.append(t)
                    continue
                words = words_of(sent)
                if words:
                    sentences.append(" ".join(words))
                    docids.append(str(doc))
                sent = []
    return sentences, docids, titles


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: normalize.py WIKITEXT_DIR OUT_DIR")
    src, out = Path(argv[0]), Path(argv[1])
    files = {}
    for split in SPLITS:
        names = [src / f"{split}.txt", src / f"wiki.{split}.tokens"]
        files[split] = next((f for f in names if f.is_file()), None)
        if files[split] is None:
            sys.exit(f"error: {names[0]}: expected WikiText-2's tokenized {split} text ({names[0].name} or "
                     f"{names[1].name}), got no such file")
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        sentences, docids, titles = normalize(files[split])
        if not titles:
            sys.exit(f"error: {files[split]}:1: expected WikiText-2 articles (' = Title = ' lines), got none")
        for ext, rows in (("txt", sentences), ("docids", docids), ("titles", titles)):
            tmp = out / f".{split}.{ext}.tmp"
            tmp.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
            tmp.replace(out / f"{split}.{ext}")
        print(f"{split}: {len(titles)} articles, {len(sentences)} sentences, "
              f"{sum(len(s.split()) for s in sentences)} words", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
