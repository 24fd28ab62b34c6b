"""The archive's config: selection and inspiration strategies, descriptors and the CVT option."""
from pathlib import Path

import pytest

from evo.config import build
from evo.core.descriptors import Continuous
from evo.core.errors import EvoError
from evo.core.inspiration import Inspiration
from evo.core.selection import Selection
from tests.test_configs import cfg

CONF = Path(__file__).parents[1] / "conf"


@pytest.mark.parametrize("group, kind", [("selection", Selection), ("inspiration", Inspiration)])
def test_every_strategy_config_builds(group, kind, tmp_path):
    names = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    assert len(names) >= 4
    for name in names:
        built = getattr(build(cfg(f"run.dir={tmp_path}", f"{group}={name}")), group)
        assert isinstance(built, kind) and built.name == name


def test_cvt_cells_select_continuous_descriptors(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", "archive.cvt_cells=64", "archive.descriptors=[block_size,roofline]"))
    assert c.cvt_cells == 64 and all(isinstance(d, Continuous) for d in c.descriptors)
    assert build(cfg(f"run.dir={tmp_path}")).cvt_cells == 0


@pytest.mark.parametrize("override, message", [
    ("archive.cvt_cells=-1", ">= 0"),
    ("archive.descriptors=[memory]", "continuous descriptors"),
])
def test_bad_cvt_settings(override, message, tmp_path):
    with pytest.raises(EvoError, match=message):
        build(cfg(f"run.dir={tmp_path}", "archive.cvt_cells=8", override))
