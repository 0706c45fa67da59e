"""The sizes of what one statement may release, part of the public API (``dpsql.MAX_...``):
the evaluators size their scripts by them, and the compile and rewrite stages enforce them."""

MAX_DOMAIN_VALUES = 10_000  # a longer public domain is none: the keys are then private
MAX_DOMAIN_CELLS = 1_000_000  # most cells a GROUP BY's zero-filled domain may release
