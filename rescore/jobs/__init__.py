"""The work behind each command, one job a command: the command module parses the options into a
job (a frozen dataclass, checked when built), runs it and prints what it returns.

rescore-nbest (``nbest.py``, on other formats ``interchange.py``), rescore-tune (``tune.py``,
``refine.py``), rescore-wer (``wer.py``), rescore-ppl (``ppl.py``), rescore-lattice (``lattice.py``)
and the NN LM scoring of a loaded N-best set (``scoring.py``)."""
