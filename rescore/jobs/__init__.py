"""The work behind each command: rescore-nbest on any input format (``nbest.py``), rescore-tune
(``tune.py``, ``refine.py``), rescore-lattice tune (``lattice_tune.py``) and the NN LM scoring of
a loaded N-best set (``scoring.py``)."""
