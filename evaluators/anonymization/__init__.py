"""Anonymization (ρ-Gain thesis, Vural 2017; ARX-style full-domain generalization).

Modules in data-flow order: ``source`` (custodian connection, working copy with row ids),
``hierarchies`` (ARX CSV tables, interval bands, masking as SQL), ``generalize`` (a lattice node
as SQL), ``rollup`` (base histogram and class tables), ``kernels`` (the search's compiled inner
loops: roll-up, one-level bound, hierarchical EMD), ``criteria`` (k, ℓ, t as SQL and as vector
checks), ``objectives`` (node scores and pruning bounds), ``lattice`` (search), ``anonymizer``
(one pass: search, apply and check in SQL), ``metrics`` and ``risk`` (released table),
``rho_gain`` (the iterative passes), ``dp_release`` (the ε-DP alternative) and ``cli``
(``dpsql anonymize``).
"""
