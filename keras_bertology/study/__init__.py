"""`bertology study`: the pretraining objectives compared at equal compute, downstream."""
