"""kbpg's benchmarks (`make bench`, `python -m bench`): one module per group. Part of the
repository, not of the installed package: they read the data sets under data/."""
