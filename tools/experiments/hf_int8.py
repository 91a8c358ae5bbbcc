"""Whether int8 weights hold for a Hugging Face causal LM (``--model hf:DIR``) on a CPU: the
per-hypothesis costs of the fast engine with the model's nn.Linear weights as int8 against fp32,
and the CPU time of its products in both.

Schemes (each from PyTorch itself, no other library):

* ``weight``  weight-only int8: each output row of every nn.Linear (the output layer too; a tied
              input embedding stays fp32) rounded to int8 with its own scale (absmax / 127),
              activations fp32. Its costs are computed with the rounded weights in fp32 products,
              which is what an int8 weight-only kernel computes up to the order of the sums; its
              speed is that of ``torch._weight_int8pack_mm`` (the CPU kernel behind torchao's
              int8 weight-only layers) against ``torch.nn.functional.linear``.
* ``dynamic`` torch.ao.quantization.quantize_dynamic with per-channel int8 weights: activations
              rounded to int8 per call (per tensor) too.

    OMP_NUM_THREADS=1 python -m tools.experiments.hf_int8 --model hf:exp/lm/smollm2 \\
        --convs 2 --utts 4 --json int8.json

The costs are those of --state-carry none (each hypothesis after <bos>), so every hypothesis is
compared after the same context. The product timings are medians of --repeat runs of one product
per distinct weight shape, at the row counts --rows (the fast engine's calls hold a trie of up to
--max-tokens rows), one thread.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time

from tools.common import SHARED_DATA as DATA

log = logging.getLogger("hf_int8")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="hf:DIR")
    p.add_argument("--nbest-dir", default=str(DATA / "tts-wikitext2-dev" / "nbest"))
    p.add_argument("--data-dir", default=str(DATA / "tts-wikitext2-dev" / "data"))
    p.add_argument("--convs", type=int, default=2, help="first N conversations of the set")
    p.add_argument("--utts", type=int, default=4, help="first M utterances of each")
    p.add_argument("--schemes", default="weight,dynamic", help="comma list of weight, dynamic")
    p.add_argument("--rows", default="64,512", help="comma list of row counts for the product timings")
    p.add_argument("--repeat", type=int, default=5, help="runs per product timing (median)")
    p.add_argument("--json", help="write the summary here")
    return p.parse_args(argv)


def int8_rows(w):
    """(int8 weight, fp32 scale per output row): symmetric, absmax / 127."""
    import torch

    scale = (w.abs().amax(1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def round_weights(model) -> int:
    """Every nn.Linear's weight replaced by its int8-rounded value (an untied copy where it is
    shared with the input embedding); returns how many layers."""
    import torch

    n = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            q, scale = int8_rows(module.weight.data)
            module.weight = torch.nn.Parameter(q.float() * scale[:, None], requires_grad=False)
            n += 1
    return n


def cost_diffs(ref, got):
    """Per-hypothesis |sum of costs| differences and per-token (word and end of sentence) ones."""
    hyp, tok = [], []
    for cr, cg in zip(ref, got, strict=True):
        for ur, ug in zip(cr, cg, strict=True):
            for hr, hg in zip(ur, ug, strict=True):
                hyp.append(abs(sum(hr) - sum(hg)))
                tok += [abs(a - b) for a, b in zip(hr, hg, strict=True)]
    return {"hyps": len(hyp), "max_abs_per_hyp": max(hyp), "mean_abs_per_hyp": statistics.fmean(hyp),
            "median_abs_per_hyp": statistics.median(hyp), "mean_abs_per_word": statistics.fmean(tok)}


def product_times(model, rows, repeat):
    """CPU seconds of one product per distinct nn.Linear weight shape (times the model's layers of
    that shape), per row count: fp32; int8 weight-only with fp32 activations; the same with bf16
    activations (the kernel's fast path where the CPU has AVX512-BF16/AMX)."""
    import torch

    shapes = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            shapes.setdefault(tuple(module.weight.shape), [module.weight.data, 0])[1] += 1
    out = {}
    for m in rows:
        total = {"fp32_s": 0.0, "int8_weight_s": 0.0, "int8_weight_bf16_act_s": 0.0}
        for (o, i), (w, count) in shapes.items():
            x = torch.randn(m, i)
            xb = x.to(torch.bfloat16)
            q, scale = int8_rows(w)
            sb = scale.to(torch.bfloat16)
            for name, fn in (("fp32_s", lambda: torch.nn.functional.linear(x, w)),
                             ("int8_weight_s", lambda: torch._weight_int8pack_mm(x, q, scale)),
                             ("int8_weight_bf16_act_s", lambda: torch._weight_int8pack_mm(xb, q, sb))):
                fn()
                times = []
                for _ in range(repeat):
                    t = time.process_time()
                    fn()
                    times.append(time.process_time() - t)
                total[name] += count * statistics.median(times)
        out[m] = total
        log.info("%d rows: the model's products %.4f s fp32; int8 weight-only %.4f s (fp32 activations), "
                 "%.4f s (bf16 activations)", m, total["fp32_s"], total["int8_weight_s"],
                 total["int8_weight_bf16_act_s"])
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    import torch

    from rescore.engine.score import score_nbest
    from rescore.models.hf import load_hf
    from tools.bench.bench_hf import load_conversations

    torch.set_num_threads(1)
    convs = load_conversations(argparse.Namespace(nbest_dir=args.nbest_dir, data_dir=args.data_dir,
                                                  convs=args.convs, utts=args.utts, weight=0.5, inv_acwt=9.5))
    kw = dict(weight=0.5, device="cpu", progress=False, state_carry="none", engine="fast")
    lm = load_hf(args.model, torch.device("cpu"), context=512)
    ref = score_nbest(lm, convs, **kw)
    summary = {"model": args.model, "hyps": sum(len(u.hyps) for c in convs for u in c), "schemes": {}}
    for scheme in args.schemes.split(","):
        lm = load_hf(args.model, torch.device("cpu"), context=512)
        if scheme == "weight":
            log.info("weight-only int8: %d linear layers", round_weights(lm.model))
        elif scheme == "dynamic":
            qconfig = {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
            lm.model = torch.ao.quantization.quantize_dynamic(lm.model, qconfig, dtype=torch.qint8)
        else:
            raise SystemExit(f"error: --schemes: expected weight or dynamic, got {scheme}")
        d = cost_diffs(ref, score_nbest(lm, convs, **kw))
        log.info("%s: %d hypotheses, |cost difference| per hypothesis max %.4f mean %.4f median %.4f nat; "
                 "per word %.4f nat", scheme, d["hyps"], d["max_abs_per_hyp"], d["mean_abs_per_hyp"],
                 d["median_abs_per_hyp"], d["mean_abs_per_word"])
        summary["schemes"][scheme] = d
    lm = load_hf(args.model, torch.device("cpu"), context=512)
    summary["products"] = product_times(lm.model, [int(r) for r in args.rows.split(",")], args.repeat)
    if args.json:
        from rescore.io.files import write_json

        write_json(args.json, summary)


if __name__ == "__main__":
    main()
