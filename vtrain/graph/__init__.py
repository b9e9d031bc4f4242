"""Operator graph: typed ops (ops.py), the builder of per-layer/embedding/head graphs (builder.py), the
MoE, MLA and MTP blocks, recompute and fusion passes. Import the submodules directly: the communication
plan imports ``vtrain.graph.ops`` and the builder imports the plan, so this package stays empty."""
