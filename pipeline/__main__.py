"""`python -m pipeline ...` runs the `seqpe` console script (as `python -m pipeline.cli` and `torchrun -m pipeline.cli` do),
for a checkout used without `pip install` or an environment whose scripts folder is not on PATH."""
from .entry import main

main()
