"""Tile settings of the Triton kernels in one form (docs/ARCHITECTURE.md, "Tile tables"): forms.py (a
dataclass per kind of kernel), tuned.py (the measured tables), table.py (the lookup and HINFER_TILES), and one
module per kernel group with its families' heuristics (linear.py, moe.py, attention.py); candidates.py: the
linear sweeps' candidate tiles."""
