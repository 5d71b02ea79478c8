"""Records -> what they mean: reports, comparisons, diagnosis, references, scaling and predictions,
the same-work table, sweeps. Reads records only; never imports execution."""
