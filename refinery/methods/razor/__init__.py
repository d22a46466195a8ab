"""RAZOR (Yang, Prenkaj, Kasneci 2024; METHODS §5): surface-feature shortcut scores and the LLM rewrite loop.

``stage``: the ``razor`` stage (light to import: the verb's options are its config's fields); ``config``: its
settings, G_α's and G_β's prompts; ``scores``: γ per row and the objective; ``rewrite``: the rewrite/verify rounds;
``verdict``: the rewritten corpus audited against the input; ``report``: the report's record (``RazorReport``), its
page and the console lines.
"""
