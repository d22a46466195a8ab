"""Label-conditioned generation (``refinery generate``; docs/models.md) over the generators of ``models.generate``:
``stage``: the ``generate`` stage (prompts generated shard by shard, checkpointed); ``config``: its config and how a
label is described in a prompt; ``prompts``: the prompts of a corpus's rows and the generated rows."""
