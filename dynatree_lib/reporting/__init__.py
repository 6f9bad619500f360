"""Reporting from the logged JSON alone: tables, plots, tree views, RESULTS.md and the plan of a run."""
