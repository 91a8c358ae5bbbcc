"""The work behind each command, one job a command: the command module parses the options into a
job (a frozen dataclass, checked when built), runs it and prints what it returns.

rescore-nbest on any input format (``nbest.py``), rescore-tune (``tune.py``,
``refine.py``), rescore-wer (``wer.py``), rescore-ppl (``ppl.py``), rescore-lattice (``lattice.py``),
rescore-train-lm (``train_lm.py``), rescore-import-lm and rescore-import-kaldi-lm (``import_lm.py``),
rescore-make-nbest (``make_nbest.py``), rescore-tts-data (``tts_data.py``), and the NN LM scoring of
a loaded N-best set (``scoring.py``)."""
