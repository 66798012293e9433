"""Shared test configuration.

This file sits in ``tests/`` (which is not a package), so pytest's default "prepend" import mode
puts ``tests/`` on ``sys.path`` when it loads it; that is what lets test modules in sub-folders
``import reference_adr`` (the plain reference implementation in tests/reference_adr.py).
"""
