"""Training a word LM: the loop (``loop.py``), its options (``options.py``), the state a resumed run
continues from (``state.py``), the data (``data.py``) and perplexity (``ppl.py``)."""
