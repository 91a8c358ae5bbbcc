"""N-best formats, one module each (reader, write-back and the reader's options), and the one
registry of them (rescore.formats.registry)."""
