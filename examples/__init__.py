"""Worked examples, run by the test suite so the documentation cannot go stale."""
