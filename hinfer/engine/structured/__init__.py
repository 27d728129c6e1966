"""Constrained decoding: a grammar per request (xgrammar), a token bitmask per constrained row each step."""
