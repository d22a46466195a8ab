"""Batching of the fine-tuning loop: every row once per epoch, little padding when grouped by length."""
import numpy as np
from conftest import SNLI_DEV

from refinery.io.corpus import load
from refinery.io.schema import PRESETS
from refinery.models.training import epoch_batches
from refinery.models.transformer import TransformerClassifier


def _padded(batches, lengths):
    return sum(lengths[b].max() * len(b) for b in batches) / lengths.sum()


def test_length_grouped_batches_visit_every_row_once_with_little_padding():
    table, _ = load([SNLI_DEV], PRESETS["snli"])
    lengths = TransformerClassifier._text_lengths(table)
    assert lengths.min() > 0 and lengths.shape == (table.num_rows,)
    rng = np.random.default_rng(0)
    grouped, plain = epoch_batches(table.num_rows, 16, rng, lengths), epoch_batches(table.num_rows, 16, rng)
    for batches in (grouped, plain):
        assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(table.num_rows))
        assert max(map(len, batches)) == 16
    assert _padded(grouped, lengths) < 1.05 < 1.2 < _padded(plain, lengths)
    widths = [lengths[b].max() for b in grouped]                        # batch order is shuffled again,
    assert not (np.all(np.diff(widths) <= 0) or np.all(np.diff(widths) >= 0))  # not longest to shortest
    again = epoch_batches(table.num_rows, 16, np.random.default_rng(0), lengths)
    assert all(np.array_equal(a, b) for a, b in zip(grouped, again))    # seeded
