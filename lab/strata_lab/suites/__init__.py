"""One module per suite; see lab/SUITES.md for the contract.  Discovered by module name."""
