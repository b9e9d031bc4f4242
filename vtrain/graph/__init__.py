"""Operator graph: typed ops (ops.py) and the builder of per-layer/embedding/head graphs."""
from vtrain.graph.builder import ComponentGraph, ModelGraph, PassOps, build_model_graph

__all__ = ["ComponentGraph", "ModelGraph", "PassOps", "build_model_graph"]
