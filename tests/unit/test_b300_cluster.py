"""A B300 row runs on a B300 node (cluster/b300x1024): NVLink5 at 900 GB/s per GPU per direction as HGX B200, and
8 x 800 Gb/s ConnectX-8 per node, not on the fallback cluster of the command (an H100's 450 GB/s NVLink4)."""
from vtrain.config.compose import compose
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.rows import row_cluster


def test_a_b300_row_runs_on_its_own_platform():
    fallback = compose(["+cluster=h100x1024"], require=False).cluster
    cluster = row_cluster(MeasuredRow(1, {"gpu": "b300", "num_gpus": "256"}), fallback)
    assert cluster.name == "b300x1024" and cluster.gpu == "b300" and cluster.gpus_per_node == 8
    assert cluster.intra_node.bandwidth_gb_per_s == 900.0  # the HGX B200 fabric, transferred
    assert cluster.inter_node.bandwidth_gb_per_s == 800.0  # 8 x 800 Gb/s per node
