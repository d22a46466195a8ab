"""The confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4), the ``confidence`` stage: ``stage``: the stage and
the method (its docstring); ``config``: its config; ``scoring``: p_M(label | text) of every row and the split by τ
(what IBADR scores its samples with)."""
