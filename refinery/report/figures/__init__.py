"""Figures for people: standalone, responsive SVG strings drawn directly (no plotting library).

Every figure is an ``<svg viewBox="0 0 W H" width="100%" style="max-width:Wpx;height:auto">`` with W ≤ 940 (the
report page's body), so it scales down to a narrow window and an A4 print. Text never overlaps other text: each
label's box is estimated from DejaVu Sans's advance widths (``measure``) and labels that would collide are moved
or left to a list beside the panel (``canvas``). One module per kind of chart; tests/svg_checks.py checks a
finished SVG the same way.
"""

from refinery.report.figures.bars import bars
from refinery.report.figures.datamap import datamap
from refinery.report.figures.heatmap import heatmap
from refinery.report.figures.histogram import histogram
from refinery.report.figures.row_flow import row_flow
from refinery.report.figures.shares import shares
from refinery.report.figures.small_multiples import small_multiples
from refinery.report.figures.zplot import zplot

__all__ = ["bars", "datamap", "heatmap", "histogram", "row_flow", "shares", "small_multiples", "zplot"]
