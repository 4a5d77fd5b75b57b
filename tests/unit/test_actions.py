"""The plan's actions are typed: every kind has one handler in the executor (or is one of its
verification stages), a kind outside the enum cannot be made, and manifest statuses read back
as the enum."""

import pytest

from cuforge.pipeline.actions import HANDLERS, STAGES
from cuforge.pipeline.plan import Action, ActionKind
from cuforge.publish.wheelhouse import Entry, Status, Wheelhouse


def test_every_kind_has_exactly_one_way_to_run():
    assert set(HANDLERS) | STAGES == set(ActionKind)
    assert not set(HANDLERS) & STAGES


def test_an_unknown_kind_cannot_be_built():
    with pytest.raises(ValueError):
        Action("compile-everything", "not a kind")
    assert Action("run", "given as text").kind is ActionKind.RUN


def test_statuses_read_back_as_the_enum(tmp_path):
    house = Wheelhouse(tmp_path)
    house.publish(None, Entry("demo", Status.SKIPPED, reason="no kernels for these arches"))
    (entry,) = house.entries()
    assert entry.status is Status.SKIPPED and not entry.status.has_wheel
    assert '"status": "skipped"' in (tmp_path / "manifest.jsonl").read_text()
    with pytest.raises(ValueError):
        Entry("demo", "built-somehow")
