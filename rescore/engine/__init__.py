"""The NN LM scoring engine: N-best costs of conversations of utterances by one or several models.

``score.py`` (score_nbest, the lockstep of several models, the carry rule), the schedules
(``fast.py`` with ``forest.py`` and ``levels.py``; ``reference.py``), what they share
(``forward.py``), the Hugging Face scorer (``hf.py``) and the fused CPU kernels (``kernels/``).
Nothing is imported here, so that importing one part (or a command) does not import torch.
"""
