"""rescore: rescore Kaldi N-best lists with neural language models."""

__version__ = "0.1.0"
