"""rescore's engine inside other toolkits' own decoding: a SpeechBrain rescorer (``speechbrain.py``)."""
