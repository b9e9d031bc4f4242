"""The rules a spec's numbers and an MoE plan must meet, each at its edge: a closed bound admits its end, an
open one does not (vtrain.workload.fields.Domain), and Megatron-Core's overlap of the MoE all-to-alls
(``--overlap-moe-expert-parallel-comm``) runs with the interleaved schedule or without pipelining (pp = 1)."""
import pytest

from vtrain import compose
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.workload.fields import FRACTION, NON_NEGATIVE, POSITIVE, POSITIVE_INT, PROBABILITY, Domain, check_value


@pytest.mark.parametrize("domain,value,admitted", [
    (NON_NEGATIVE, 0.0, True), (NON_NEGATIVE, -1e-12, False),  # [0, inf): its end is in
    (POSITIVE, 0.0, False), (POSITIVE, 1e-12, True),  # (0, inf): its end is out
    (FRACTION, 0.01, True), (FRACTION, 1.0, True), (FRACTION, 0.0099, False), (FRACTION, 1.0001, False),
    (PROBABILITY, 0.0, True), (PROBABILITY, 1.0, False), (PROBABILITY, 0.999, True),  # [0, 1)
    (POSITIVE_INT, 1, True), (POSITIVE_INT, 0, False), (POSITIVE_INT, 1.5, False),
    (Domain(lo=2.0, lo_open=True, hi=4.0), 2.0, False), (Domain(lo=2.0, hi=4.0, hi_open=True), 4.0, False),
    (Domain(lo=2.0, hi=4.0), 2.0, True), (Domain(lo=2.0, hi=4.0), 4.0, True),
    (NON_NEGATIVE, True, False), (NON_NEGATIVE, float("inf"), False), (NON_NEGATIVE, float("nan"), False),
])
def test_domain_bounds_at_their_ends(domain, value, admitted):
    assert domain.admits(value) is admitted


def test_a_value_outside_says_the_rule_and_why():
    with pytest.raises(ConfigError) as err:
        check_value("gpu.memory_efficiency", 0.0, FRACTION)
    assert str(err.value) == ("gpu.memory_efficiency=0.0: must be a finite number in [0.01, 1] "
                              "(an efficiency: below 1% is no longer a physical GPU)")
    assert PROBABILITY.rule() == "must be a finite number in [0, 1)"
    assert POSITIVE.rule() == "must be a finite number > 0" and POSITIVE_INT.rule() == "must be an integer >= 1"


MOE = ["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.dp=8", "parallelism.ep=8",
       "parallelism.sequence_parallel=false", "training.global_batch_size=512", "training.seq_len=4096",
       "parallelism.overlap_moe_comm=true"]


def test_overlapped_moe_comm_runs_without_pipelining():
    assert build_workload(compose([*MOE, "parallelism.pp=1"])).plan.overlap_moe_comm


@pytest.mark.parametrize("pp", [2, 4])
def test_overlapped_moe_comm_with_1f1b_pipelining_is_refused(pp):
    with pytest.raises(ConfigError, match=r"overlap_moe_comm=true needs schedule=interleaved \(or pp=1\), not 1f1b"):
        build_workload(compose([*MOE, f"parallelism.pp={pp}", "parallelism.schedule=1f1b"]))


def test_a_field_whose_none_means_a_default_may_be_left_empty():
    """spec(none_means=...): the config schema types the field Optional, and the builder fills it in."""
    import dataclasses

    from vtrain.config.build import model_spec
    from vtrain.workload.model import ModelSpec

    meta = {f.name: f.metadata for f in dataclasses.fields(ModelSpec)}
    assert meta["num_kv_heads"]["none_means"] == "num_heads (multi-head attention)"
    assert meta["ffn_hidden_size"]["none_means"] == "4 * hidden_size" and meta["hidden_size"]["none_means"] == ""
    m = model_spec(compose(["+model=gpt_1_7b", "+cluster=h100x1024", "model.num_kv_heads=null",
                            "model.ffn_hidden_size=null"]).model)
    assert (m.num_kv_heads, m.ffn_hidden_size) == (m.num_heads, 4 * m.hidden_size)


def test_spec_records_what_an_empty_value_means_where_the_config_schema_reads_it():
    """spec(none_means=...) stores its sentence in the field's metadata; the config schema (vtrain.config.specs)
    reads it there and types the field Optional with None as its default, so a config may leave the field out
    (the builder fills it in); a field without it stays required (OmegaConf's '???')."""
    import dataclasses

    from omegaconf import MISSING

    from vtrain.config.specs import schema_of
    from vtrain.workload.fields import spec

    @dataclasses.dataclass(frozen=True)
    class Probe:  # made here, not at import: the spec() calls run inside the test
        width: int = spec(domain=POSITIVE_INT, none_means="the hidden size")
        depth: int = spec(domain=POSITIVE_INT)

    meta = {f.name: f.metadata for f in dataclasses.fields(Probe)}
    assert (meta["width"]["none_means"], meta["depth"]["none_means"]) == ("the hidden size", "")
    schema = {f.name: f for f in dataclasses.fields(schema_of(Probe, name="SpecRulesProbeConfig"))}
    assert (schema["width"].default, schema["depth"].default) == (None, MISSING)
