"""Analysis of run directories with pandas; knows nothing about torch."""
