"""What a Solution's enums put in the registry is the text the columns always held (both backends)."""
from __future__ import annotations

from sqlalchemy import create_engine, text

from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import MeasurementRecord, SolutionRecord
from arbiter.store.sql import SqlStore, to_url
from tests.store._workers import ENV, key


def test_chosen_by_and_timing_mode_are_stored_as_plain_text(backend):
    db = backend.new()
    st = SqlStore(db)
    st.save_solution(SolutionRecord.of(key(1), Solution("lab_kernel", {"tile": 8}, "lab_kernel@1"),
                                       ChosenBy.MEASURED, ENV, margin=0.2))
    st.save_measurements(key(1), ENV, [MeasurementRecord("lab_kernel", {"tile": 8}, TimingMode.LATENCY, 1e-5,
                                                         9e-6, 1.1e-5, 0.2, 10, 0.0)])
    engine = create_engine(to_url(db))
    try:
        with engine.connect() as conn:
            policy = conn.execute(text("SELECT policy FROM solutions")).scalar_one()
            mode = conn.execute(text("SELECT mode FROM measurements")).scalar_one()
    finally:
        engine.dispose()
    assert (type(policy), policy) == (str, "measured") and (type(mode), mode) == (str, "latency")
    back = SqlStore(db).load_solution(key(1), ENV)
    assert back.chosen_by is ChosenBy.MEASURED and back.solution == Solution("lab_kernel", {"tile": 8})
