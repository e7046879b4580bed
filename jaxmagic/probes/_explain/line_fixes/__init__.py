"""Fixes written from the failing line of a tracer error: each fitter's rewrite, and the trial before one is offered."""
