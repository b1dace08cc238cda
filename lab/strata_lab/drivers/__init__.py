"""Drivers: programs the lab starts as a sample's command when the program under test needs a
partner (a server and its load generator).  Each applies $STRATA_LAB_PRELOAD to its target only."""
