"""TP-communication overlap splits the GEMM it is pipelined with into one GEMM per chunk (sim.launch)."""
import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.graph.ops import Gemm
from vtrain.sim.launch import chunked_gemm_s, overlapped_s


@pytest.fixture(scope="module")
def cost():
    return cost_model_for(build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024"])))


def test_a_split_gemm_costs_its_pieces(cost):
    fwd = Gemm("fc1", m=8192, n=3584, k=4096)
    wgrad = Gemm("fc1.wgrad", m=4096, n=3584, k=8192)
    assert chunked_gemm_s(fwd, 8, cost) == pytest.approx(8 * cost.compute_time_s(Gemm("fc1", m=1024, n=3584, k=4096)))
    assert chunked_gemm_s(wgrad, 8, cost) == pytest.approx(
        8 * cost.compute_time_s(Gemm("fc1.wgrad", m=4096, n=3584, k=1024)))
    # smaller pieces fill the GPU less well and pay the per-kernel time each: never cheaper than one GEMM
    assert chunked_gemm_s(fwd, 8, cost) > cost.compute_time_s(fwd)
    assert chunked_gemm_s(fwd, 1, cost) == pytest.approx(cost.compute_time_s(fwd))


def test_overlap_hides_the_shorter_side_but_one_chunk():
    # compute 8 ms, communication 4 ms in 4 chunks, 10% slowdown while both run: 8 + 0.4 + 1
    assert overlapped_s(8e-3, 4e-3, 4, 0.1) == pytest.approx(9.4e-3)
    assert overlapped_s(2e-3, 4e-3, 4, 0.1) == pytest.approx(4.5e-3)  # communication-bound
