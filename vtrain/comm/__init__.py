"""The communication plan: every collective and transfer of a training iteration, built in one place.

:func:`vtrain.comm.plan.build_comm_plan` lists, from the workload, each communication with its group,
placement on the cluster, bytes, the stream it runs on and what it may overlap with. The graph builder
places the tensor-parallel entries between its GEMMs, the engine schedules the rest, pricing and the
timeline read the same entries. A new parallelism adds its entries here.
"""
