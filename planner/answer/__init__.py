"""From a search's result to what a user reads: estimates and plans, explanations, comparisons, traces,
calibration, files and the CLI's flags and tables."""
