"""The NN LM scoring engine: N-best costs of conversations of utterances by one or several models.

``score.py`` (score_nbest, the lockstep of several models, the carry rule), the schedules
(``fast.py`` with ``forest.py`` and ``levels.py``; ``reference.py``), what they share
(``forward.py``; the plain types in ``types.py``), the inference paths of the models it knows
(``lstm_steps.py``: an LSTM's one-token steps, the softmax output's kernels), the Hugging Face
scorer (``hf.py``) and the fused CPU kernels (``kernels/``). Nothing is imported here, so that
importing one part (or a command) does not import torch.
"""
