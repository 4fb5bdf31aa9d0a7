"""What a configuration implies for a model on a stack, as plain data: per layer its ops (GEMMs by shape,
attention, memory-bound work with its bytes, kernels), its FLOPs, parameters and saved activations. Imports
only ``planner.specs``."""
