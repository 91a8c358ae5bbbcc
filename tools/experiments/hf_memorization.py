"""How much of a text a pretrained causal LM has seen: its perplexity on the text and how often it
reproduces the text verbatim, beside the same figures on a text written after its training data
was collected.

Each document is tokenized whole; every run of --continuation tokens after the first --prefix is
a probe: the model sees the --prefix tokens before it and predicts the run token by token (teacher
forcing). Per set: the perplexity per token over the probes' tokens, the top-1 accuracy (the
model's most likely next token is the text's), and the share of probes reproduced verbatim (every
token of the run the most likely one: greedy decoding from the prefix would write the run
exactly). A model that saw a text during training predicts it better than text of the same style
that it cannot have seen; a verbatim share well above the unseen text's is the sign of
memorisation.

    python -m tools.experiments.hf_memorization --model hf:exp/lm/smollm2 --json mem.json \\
        --set dev=wikitext:../shared/data/wikitext-2/valid.txt \\
        --set unseen=plain:tools/experiments/data/unseen_encyclopedic.txt

A set is NAME=wikitext:FILE (WikiText's tokenized form, detokenized to the running text of its
articles, headings as plain lines; probes that contain <unk> are skipped) or NAME=plain:FILE (one
paragraph per line, the whole file one document). --max-probes takes that many probes, evenly
spaced, from a larger set. One thread unless --threads.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from pathlib import Path
from typing import List, Tuple

_HEADING = re.compile(r"^(?:= )+(.*?)(?: =)+$")


def detokenize(line: str) -> str:
    """One line of WikiText's tokenized form as running text (the usual WikiText detokenizer)."""
    m = _HEADING.match(line.strip())
    if m:
        return m.group(1).strip()
    s = line.strip()
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    for p in (".", ",", ":", ";", "!", "?", "%", ")", "]", "}"):
        s = s.replace(" " + p, p)
    for p in ("(", "[", "{", "$"):
        s = s.replace(p + " ", p)
    s = re.sub(r'" ([^"]*?) "', r'"\1"', s)
    s = re.sub(r" ('s|'re|'ve|'m|'ll|'d|n't)\b", r"\1", s)
    s = s.replace("s ' ", "s' ")
    return s


def wikitext_documents(path: Path) -> List[str]:
    """The articles of a WikiText file (each starts at a level-1 heading ' = Title = ')."""
    docs: List[List[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if re.match(r"^ = [^=].* = $", line) or not docs:
            docs.append([])
        docs[-1].append(detokenize(line))
    return ["\n".join(d) for d in docs]


def probes(ids: List[int], prefix: int, run: int) -> List[Tuple[int, int]]:
    """(start, end) of each probe window: ``prefix`` tokens, then the ``run`` predicted."""
    return [(s - prefix, s + run) for s in range(prefix, len(ids) - run + 1, run)]


def score(model, windows: List[List[int]], run: int, batch: int):
    """Per window: (sum of the run's token NLLs, tokens that are the top-1, all top-1)."""
    import torch

    out = []
    with torch.inference_mode():
        for i in range(0, len(windows), batch):
            x = torch.tensor(windows[i:i + batch])
            logits = model(input_ids=x, logits_to_keep=run + 1).logits[:, :-1].float()
            target = x[:, -run:]
            logp = torch.log_softmax(logits, dim=-1)
            nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).sum(-1)
            hit = logits.argmax(-1) == target
            for n, h in zip(nll.tolist(), hit.tolist()):
                out.append((n, sum(h), all(h)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", required=True, help="hf:DIR (as rescore-nbest --model)")
    ap.add_argument("--set", action="append", required=True, metavar="NAME=KIND:FILE")
    ap.add_argument("--prefix", type=int, default=32, help="tokens the model sees before a probe")
    ap.add_argument("--continuation", type=int, default=16, help="tokens predicted per probe")
    ap.add_argument("--max-probes", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    import torch

    from rescore.models.hf import load_hf

    torch.set_num_threads(args.threads)
    lm = load_hf(args.model, torch.device("cpu"))
    tok = lm.tokenizer
    rows = []
    for spec in args.set:
        name, _, rest = spec.partition("=")
        kind, _, file = rest.partition(":")
        if kind not in ("wikitext", "plain") or not file:
            ap.error(f"--set {spec}: expected NAME=wikitext:FILE or NAME=plain:FILE")
        path = Path(file)
        docs = wikitext_documents(path) if kind == "wikitext" else [path.read_text(encoding="utf-8")]
        unk = "<unk>"
        windows = []
        for d in docs:
            ids = tok(d, add_special_tokens=False)["input_ids"]
            for a, b in probes(ids, args.prefix, args.continuation):
                if kind == "wikitext" and unk in tok.decode(ids[a:b]):
                    continue
                windows.append(ids[a:b])
        total = len(windows)
        if total > args.max_probes:
            step = total / args.max_probes
            windows = [windows[int(i * step)] for i in range(args.max_probes)]
        res = score(lm.model, windows, args.continuation, args.batch)
        n_tok = len(res) * args.continuation
        row = {"set": name, "source": f"{kind}:{path.name}", "documents": len(docs),
               "probes": len(res), "probes_available": total, "tokens": n_tok,
               "ppl_per_token": round(math.exp(sum(r[0] for r in res) / n_tok), 2),
               "top1_accuracy": round(sum(r[1] for r in res) / n_tok, 4),
               "verbatim_share": round(sum(r[2] for r in res) / len(res), 4),
               "verbatim": sum(r[2] for r in res)}
        rows.append(row)
        logging.info("%s: %s", name, row)
    print(f"| set | probes | ppl per token | top-1 | reproduced verbatim ({args.continuation} tokens "
          f"after {args.prefix}) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['set']} | {r['probes']} | {r['ppl_per_token']:.2f} | {100 * r['top1_accuracy']:.1f} % "
              f"| {r['verbatim']} ({100 * r['verbatim_share']:.1f} %) |")
    if args.json:
        from rescore.io.files import write_json
        write_json(args.json, {"model": args.model, "prefix": args.prefix,
                               "continuation": args.continuation, "sets": rows})


if __name__ == "__main__":
    main()
