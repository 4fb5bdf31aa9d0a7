"""How long each op and collective takes on a device: the GPU's rates and efficiencies, the NCCL model, and
a CPU host with its measured classes. The only layer that asks what kind of device it prices for. Imports
``planner.workload`` and ``planner.specs``."""
