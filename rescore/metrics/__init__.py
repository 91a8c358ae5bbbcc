"""WER, N-best oracle WER, rare-word buckets (per-bucket WER and cross-entropy), the comparison
of systems with a paired bootstrap, the reports and their charts.

- :mod:`rescore.metrics.wer`: alignment (jiwer), corpus edit counts, oracle WER (rapidfuzz);
- :mod:`rescore.metrics.buckets`: rare-word buckets (Li, Povey, Khudanpur 2020) and their table;
- :mod:`rescore.metrics.compare`: two or more systems on the same references, paired bootstrap
  (Bisani & Ney 2004) over utterances or whole recordings/speakers;
- :mod:`rescore.metrics.report`: the reports of rescore-wer and rescore-nbest, as records whose
  ``as_dict()`` is the JSON written, and as text;
- :mod:`rescore.metrics.plots`: the bucket charts (PNG).

Everything is importable from ``rescore.metrics`` itself.
"""

from rescore.metrics.buckets import (BUCKET_RULE, BucketMap, _count_label, _range_label, bucket_ce_difference,
                                     bucket_cross_entropy, bucket_wer, format_bucket_table, rare_word_buckets)
from rescore.metrics.compare import (FIRST_PASS, MIN_BOOTSTRAP_UNITS, RESCORED, BootstrapInfo, BucketComparison,
                                     BucketDifference, Comparison, CorpusFigures, Difference, NbestWords, SystemScore,
                                     _bootstrap, _finite, _resample_counts, compare_nbest, compare_systems,
                                     corpus_figures, read_groups)
from rescore.metrics.plots import (bucket_ticks, nbest_chart_title, plot_bucket_series, plot_buckets,
                                   plot_comparison)
from rescore.metrics.record import JsonRecord
from rescore.metrics.report import (NbestReport, WerReport, describe_bootstrap, format_comparison, format_report,
                                    format_wer_report, nbest_report, wer_report)
from rescore.metrics.wer import (Alignment, WerStats, align, check_scorable, oracle_errors, oracle_wer,
                                 warn_suspect_inputs, word_errors)

__all__ = [
    "BUCKET_RULE", "FIRST_PASS", "MIN_BOOTSTRAP_UNITS", "RESCORED", "Alignment", "BootstrapInfo", "BucketComparison",
    "BucketDifference", "BucketMap", "Comparison", "CorpusFigures", "Difference", "JsonRecord", "NbestReport",
    "NbestWords", "SystemScore", "WerReport", "WerStats", "warn_suspect_inputs",
    "_bootstrap", "_count_label", "_finite", "_range_label", "_resample_counts", "align", "bucket_ce_difference",
    "bucket_cross_entropy", "bucket_ticks", "bucket_wer", "check_scorable", "compare_nbest", "compare_systems",
    "corpus_figures", "describe_bootstrap", "format_bucket_table", "format_comparison", "format_report",
    "format_wer_report",
    "nbest_chart_title", "nbest_report", "oracle_errors", "oracle_wer", "plot_bucket_series", "plot_buckets",
    "plot_comparison", "rare_word_buckets", "read_groups", "wer_report", "word_errors",
]
