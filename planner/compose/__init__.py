"""Per-stage and per-rank terms of a configuration class: overlap, the end of step, memory peaks and the
pipeline schedule's simulation; where seconds become integer ns and the affine forms CP-SAT needs are built."""
