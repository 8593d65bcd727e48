"""Issue 20.4: one table of device facts (pmu.device.KNOWN_DEVICES): the H200's L2 is the same
wherever sitsprof states it without asking the device (NVML fallback, the dry run's assumed
H200, the planner's fallback), and a model matches as a whole word (a GH200 is not an H200)."""
from __future__ import annotations

import pytest

from sitsprof.common.sizes import MiB
from sitsprof.pmu.device import KNOWN_DEVICES, known_device


def test_h200_l2_is_one_figure_everywhere():
    from sitsprof.probes.assumed import assumed_h200
    from sitsprof.probes.suite import FALLBACK_L2_BYTES

    l2, sms, source = KNOWN_DEVICES["H200"]
    assert l2 == 60 * MiB and sms == 132 and "lent H200" in source
    assumed = assumed_h200()
    assert (assumed.l2_bytes, assumed.sm_count) == (l2, sms)
    assert FALLBACK_L2_BYTES == KNOWN_DEVICES["H100"][0] == 50 * MiB  # the smaller: planning stays inside


@pytest.mark.parametrize("name, model", [("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200"),
                                         ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA GH200 480GB", None),
                                         ("NVIDIA H20", None), ("NVIDIA A100-SXM4-40GB", None)])
def test_models_match_as_whole_words(name, model):
    got = known_device(name)
    assert (got[0] if got else None) == model


def test_nvml_fallback_uses_the_table(fake_gpu):
    """Without CUDA the L2 comes from the table, and the run says so."""
    from sitsprof.pmu.device import device_facts

    facts = device_facts(0, cuda=False)
    assert facts["name"] == "NVIDIA H200"
    assert facts["l2_bytes"] == 60 * MiB and facts["sources"]["l2_bytes"] == "known H200 L2 size"
