"""The test suite, one folder per package of rescore (tests/engine for rescore/engine, ...),
tools/ under tests/tools; shared helpers in conftest.py."""
