"""The harness: profiles, data, model loading, measurement, the result store, experiments, costs and the pair report."""
