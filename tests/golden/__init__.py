"""Golden outputs of every kvdoctor command, captured before issue 17's move (see test_golden.py)."""
