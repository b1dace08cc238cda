"""strata-lab: runs workloads under several allocators and says, with statistics, which wins."""

__version__ = "0.1.0"
