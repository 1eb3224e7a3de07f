import datetime as dt

from kinematic_pipeline.calendar import (
    is_trading_day,
    previous_trading_day,
    trading_day_on_or_after,
    trading_days,
    weekday_closures,
)


def test_nyse_closures_are_not_trading_days():
    for closed in ["2001-09-11", "2001-09-14", "2012-10-29", "2018-12-05", "2025-01-09", "2000-01-17"]:
        assert not is_trading_day(dt.date.fromisoformat(closed)), closed
    assert is_trading_day(dt.date(2000, 1, 3))
    assert dt.date(2025, 1, 9) in weekday_closures(dt.date(2025, 1, 1), dt.date(2025, 1, 31))


def test_a_full_year_has_the_usual_number_of_sessions():
    assert len(trading_days(dt.date(2019, 1, 1), dt.date(2019, 12, 31))) == 252
    assert len(trading_days(dt.date(2000, 1, 3), dt.date(2022, 12, 30))) == 5787


def test_a_bar_on_a_closed_day_belongs_to_the_next_session():
    saturday = dt.date(2021, 3, 6)
    assert trading_day_on_or_after(saturday) == dt.date(2021, 3, 8)
    assert previous_trading_day(dt.date(2021, 3, 8)) == dt.date(2021, 3, 5)
