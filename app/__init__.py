"""Closer: learn from human "which is closer?" judgements."""
