"""Tools beside the package, run from the checkout's root as modules (the checkout's rescore is
then the one imported, with no sys.path edits):

    python -m tools.bench.bench_engine --help       benchmarks and checks (bench/)
    python -m tools.kaldi.compare_pytorchnn --help   against Kaldi's binaries and recipes (kaldi/)
    python -m tools.experiments.ablation --help      experiments behind docs/ (experiments/)

Shell scripts run by their path (bash tools/kaldi/kaldi_check.sh ...). What the tools share
(the checkout's root, the shared data) is in tools/common.py.
"""
