"""The test tiers. ``./test.sh`` runs the fast tier: every decoder's greedy exactness on tiny models of each
supported architecture on this CPU's default instruction set, the sampling tests and their power checks at reduced
draws, bad input, structure, the records' schema and the smoke notebooks (nbval). ``./test.sh --full`` (``pytest
--full``; what CI runs) adds the tests marked ``full``: the long exactness matrix, every instruction set the CPU
has, the compiled graphs, the real cpu pair, the measuring pipelines end to end, and the statistical tests at their
full draws. ``conftest.pytest_configure`` sets ``FULL``; a module reads it at import, after that."""

FULL = False


def tiered(fast, full):
    """A size in this tier: a statistical test's draws, a measured run's replicates."""
    return full if FULL else fast
