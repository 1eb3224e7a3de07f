"""The report a whole ci materialization wrote (``KP_GOLDEN_WAREHOUSE``) prints every table it holds under the title
its name has in ``report_titles.ALL_TITLES``, with that name's caption (``table_headings``) under it: titles and
captions are keyed by one name in one home, so none is lost on the way to a real ``report.md``."""

from __future__ import annotations

import pytest

from kinematic_pipeline.stages.report_titles import TABLE_TITLES, table_headings
from kinematic_pipeline_tests.conftest import golden_ci_settings

pytestmark = pytest.mark.e2e


def test_every_table_of_the_real_report_is_under_its_title_with_its_caption():
    settings = golden_ci_settings()
    text = settings.warehouse.report_file.read_text()
    tables = {p.stem for p in settings.warehouse.report_tables_dir.glob("*.parquet")}
    printed = {name: heading for name, heading in table_headings(settings).items() if name in tables}
    assert set(TABLE_TITLES) <= set(printed)  # the paper's tables are all there
    for name, (title, caption) in printed.items():
        mark = f"_{title}_" if name == "verdict" else f"### {title}"
        assert text.count(f"\n{mark}\n") == 1, name
        if caption:
            assert f"\n{mark}\n\n{caption}\n\n|" in text, name
