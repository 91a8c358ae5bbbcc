"""N-best sets and what is done with them: loading a dir (``sets.py``), any input format as a
table (``tables.py``), the cost formula (``interp.py``), applying and tuning it (``combine.py``),
input checks (``checks.py``), reachability (``reach.py``) and lattice rescoring by path cover
(``lattice.py``)."""
