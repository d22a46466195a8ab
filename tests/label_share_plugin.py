"""docs/extending.md's example table stage, written outside refinery: the stage tests/test_extending.py registers and
holds to the contract with ``check_stage``."""
from dataclasses import dataclass

import pyarrow as pa

from refinery.core.report_record import ReportRecord
from refinery.core.validation import number_in, setting, validate
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.table_stage import CorpusPart, TableStage
from refinery.report.page import fields


@dataclass
class LabelShareConfig:
    rare: float = setting(0.2, number_in(0, 1), "A label under this share of the rows is rare.")   # → --rare

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True, kw_only=True)
class LabelShareReport(ReportRecord):
    """report.json: the rows, the input's rejects and each label's share of the rows."""

    rows: int
    rejected: int
    shares: dict


class LabelShare(TableStage):
    """Each row with its label's share of the corpus (label_share) and whether that label is rare."""

    name, Config = "label-share", LabelShareConfig
    needs = ("id", "text_a", "label")
    adds = ("label_share", "rare_label")
    output = Output.CORPUS
    report_type = LabelShareReport

    def compute(self, rows):
        reader = rows.con.execute(
            "SELECT * EXCLUDE (row_id), count(*) OVER (PARTITION BY label) / count(*) OVER () AS label_share, "
            "count(*) OVER (PARTITION BY label) / count(*) OVER () < ? AS rare_label FROM rows ORDER BY row_id",
            [self.config.rare]).to_arrow_reader(10_000)
        return [CorpusPart("corpus", (pa.Table.from_batches([b]) for b in reader), rows.rejects)]

    def result(self, manifests, out):
        manifest = manifests["corpus"]
        shares = {label: n / manifest.rows for label, n in manifest.labels.items()}
        report = LabelShareReport(rows=manifest.rows, rejected=manifest.rejected, shares=shares)
        out.publish_report(report, out.report_page("Label shares").section("Labels", fields(shares)))
        return StageResult(manifest.rows + manifest.rejected, {"out": manifest.rows, "input rejects": manifest.rejected},
                           report,
                           f"{len(shares)} labels, the rarest {min(shares.values()):.1%} of the rows")
