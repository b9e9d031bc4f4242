"""torchtitan's NVFP4 recipe keeps its last ceil(0.15 x layers) decoder layers in bf16 (graph.builder.tail_layers,
stack.nvfp4_bf16_tail_fraction): the tail's layers run bf16 GEMMs, sit on the last pipeline positions and hold
bf16 activations."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph, tail_layers
from vtrain.graph.ops import Gemm
from vtrain.graph.options import graph_options
from vtrain.sim.stage_costs import tail_at
from vtrain.workload.partition import partition

# the torchtitan NVFP4 job of vtrain/data/modern_gpus/torchtitan_rows.csv rows 40-42 (Llama 3 8B on 4 GB200)
PLAN = ["+model=llama3_8b", "+cluster=gb200_nvl72x16", "stack=torchtitan_fsdp2_compile", "parallelism.tp=1",
        "parallelism.pp=1", "parallelism.dp=4", "parallelism.micro_batch_size=32", "training.global_batch_size=128",
        "training.seq_len=2048", "parallelism.zero_stage=3", "parallelism.recompute=selective"]


def workload(*extra):
    return build_workload(compose([*PLAN, *extra]))


def test_the_recipe_keeps_llama_layers_27_to_31_and_qwen_30_to_35_in_bf16():
    w = workload("training.precision=nvfp4")
    assert tail_layers(w.model, w.plan, graph_options(w.stack)) == 5  # ceil(32 x 0.15)
    q = build_workload(compose([*PLAN, "training.precision=nvfp4", "model=qwen3_8b"]))
    assert q.model.num_layers == 36 and tail_layers(q.model, q.plan, graph_options(q.stack)) == 6  # ceil(5.4)
    for other in (workload("training.precision=mxfp8"), workload("training.precision=nvfp4",
                                                                 "stack.nvfp4_bf16_tail_fraction=0")):
        assert tail_layers(other.model, other.plan, graph_options(other.stack)) == 0


def test_the_tail_layer_runs_bf16_gemms_the_others_nvfp4():
    w = workload("training.precision=nvfp4")
    comm = build_comm_plan(w, partition(w.model, w.plan))
    g = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack))
    assert g.tail_layers == 5 and g.tail_layer is not None
    gemms = [op for op in g.layer.forward.ops if isinstance(op, Gemm) and not op.attention]
    tail = [op for op in g.tail_layer.forward.ops if isinstance(op, Gemm) and not op.attention]
    assert gemms and all(op.precision == "nvfp4" for op in gemms)
    assert tail and all(op.precision == "" and op.dtype_bytes == 2 for op in tail)


@pytest.mark.parametrize("pp, expected", [(1, [5]), (4, [0, 0, 0, 5]), (8, [0, 0, 0, 0, 0, 0, 1, 4])])
def test_the_tail_sits_on_the_last_positions(pp, expected):
    w = workload("training.precision=nvfp4", f"parallelism.pp={pp}", "parallelism.micro_batch_size=1")
    part = partition(w.model, w.plan)
    assert [tail_at(part, q, 5) for q in range(part.positions)] == expected


def test_five_of_32_layers_in_bf16_add_five_32nds_of_the_bf16_gap():
    """Layers add up at pp = 1: the tail costs 5/32 of what the whole model's bf16 step costs over NVFP4's."""
    def seconds(*extra):
        return simulate(compose([*PLAN, *extra])).iteration_time_s
    nvfp4 = seconds("training.precision=nvfp4", "stack.nvfp4_bf16_tail_fraction=0")
    tail = seconds("training.precision=nvfp4")
    bf16 = seconds("training.precision=bf16")
    assert tail - nvfp4 == pytest.approx(5 / 32 * (bf16 - nvfp4), rel=0.05)


def test_the_tail_holds_bf16_activations():
    def peak(*extra):
        return simulate(compose([*PLAN, *extra])).peak_memory_bytes
    nvfp4 = peak("training.precision=nvfp4", "stack.nvfp4_bf16_tail_fraction=0")
    tail = peak("training.precision=nvfp4")
    assert tail > nvfp4
