"""Readers and writers for the file formats rescore speaks (Kaldi tables, symbol tables, data dirs),
one module each (rescore.io.kaldi, ...): import what you use from its module, so that a command
that needs none of the numerical readers starts without them."""
