"""Does it help? The same task model trained on each training corpus, scored on challenge sets.

``stage``: the ``compare`` stage and its config (light to import: the verb's options are the config's fields);
``config``: the task model's settings and the specs that name the corpora; ``training``: the corpora and
evaluation sets read, the leak check and every (corpus, seed) run; ``statistics``: accuracies, gains and their
bootstrap intervals, breakdowns, warnings and notes; ``slices``: the baseline's most biased features scored slice
by slice (AUDAC); ``page``: the report page and the console summary.
"""
