"""Empirical tuning: the store of measured winners, measuring candidate plans, the search."""
